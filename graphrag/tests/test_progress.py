"""A graph build tells the KB page how it is going, over the page's websocket."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from graphrag.models import GraphBuild
from graphrag.runner import run_locked_build
from graphrag.tests.test_build import DOCS, ingest
from knowledge.tests.test_consumers import communicator, session_headers

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_build_streams_its_progress_and_then_the_graphs_size(kb, alice):
    await database_sync_to_async(ingest)(kb, {"ops.md": DOCS["ops.md"]})
    socket = communicator(await database_sync_to_async(session_headers)(alice))
    assert (await socket.connect())[0]
    await socket.receive_from()  # the rows and counts sent on connect
    await socket.receive_from()

    await database_sync_to_async(run_locked_build)(kb)

    messages = []
    while not await socket.receive_nothing(timeout=0.2):
        messages.append(await socket.receive_from())
    statuses = [m for m in messages if 'id="kb-graph" hx-swap-oob="true"' in m]
    assert any("Building the knowledge graph" in m for m in statuses)
    assert "entities" in statuses[-1] and "explore" in statuses[-1]
    await socket.disconnect()


def test_the_kb_page_shows_the_graph_line(alice_client, kb):
    ingest(kb, {"ops.md": DOCS["ops.md"]})
    run_locked_build(kb)

    page = alice_client.get(f"/kb/{kb.slug}/").content.decode()

    entities = kb.entities.count()
    assert f"Graph: {entities} entities" in page and f'href="/kb/{kb.slug}/graph/"' in page
    assert GraphBuild.objects.get(kb=kb).status == GraphBuild.DONE


def _graph_line(client, kb) -> str:
    page = " ".join(client.get(f"/kb/{kb.slug}/").content.decode().split())
    return page[page.index('id="kb-graph"'):].split("</div>")[0]


def test_a_running_build_says_which_step_it_is_in_and_how_far_that_step_is(alice_client, kb):
    build = GraphBuild.objects.create(kb=kb, status=GraphBuild.RUNNING, full=True, progress=45)
    line = _graph_line(alice_client, kb)
    assert "Building the knowledge graph, step 1 of 2: reading the documents, 50%." in line

    GraphBuild.objects.filter(pk=build.pk).update(progress=95)
    line = _graph_line(alice_client, kb)
    assert "step 2 of 2: grouping entities into communities." in line and "%" not in line


def test_a_second_round_for_new_documents_says_it_updates_the_graph(alice_client, kb):
    ingest(kb, {"ops.md": DOCS["ops.md"]})
    run_locked_build(kb)
    GraphBuild.objects.create(kb=kb, status=GraphBuild.RUNNING, full=False, progress=0)

    line = _graph_line(alice_client, kb)
    assert "Updating the knowledge graph with new documents, step 1 of 2: reading the documents, 0%." in line


def test_the_built_time_is_marked_for_the_page_to_keep_live(alice_client, kb):
    ingest(kb, {"ops.md": DOCS["ops.md"]})
    run_locked_build(kb)
    finished = GraphBuild.objects.get(kb=kb).finished_at

    line = _graph_line(alice_client, kb)
    assert f'built <time datetime="{finished.isoformat()}" data-relative>' in line
