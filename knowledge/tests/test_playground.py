"""The retrieval playground page: access, bad input, and every stage of a real retrieval."""

from __future__ import annotations

import re

import pytest
from django.http import QueryDict
from django.test import Client
from django.urls import reverse

from knowledge import search as search_backends
from knowledge.forms import PlaygroundForm
from knowledge.ingest import run_ingestion, submit_document
from knowledge.models import Document, DocumentStatus, KnowledgeBase, Visibility
from knowledge.recall import PathWeights
from knowledge.retrieval import RetrievalParams, save_params_for_kb

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}

HANDBOOK = b"""# Operations handbook

How the team runs the service, from install to incident review.

## 1 Installation

Run the installer, apply the migrations and create the first user. The installer writes
the configuration file and checks that the database answers.

## 2 Backups

Back up the database every night and test a restore every month. Keep backups off site.

## 3 Incident review

Write down what happened, what was affected and what changes, within two working days.
"""
DEPLOYMENT = b"""# Deployment guide

Serve the application with daphne behind a reverse proxy.

## Workers

Run Celery workers for the ingestion queue and scale them with the upload volume.

## Configuration

The configuration file names the database, the cache and the installer's defaults.
"""
CONCRETE = """# 混凝土规范

## 第一章 总则

混凝土结构工程施工质量验收应符合《混凝土结构工程施工质量验收规范》的规定。施工单位应建立质量管理体系。
""".encode()


@pytest.fixture(autouse=True)
def _own_search_backend(monkeypatch):
    # The in-memory index caches a snapshot per (kb pk, content_version); the test database
    # reuses both after each rollback, so a shared backend could serve another test's chunks.
    monkeypatch.setattr(search_backends, "_backend", None)


@pytest.fixture
def ingested_kb(kb, django_capture_on_commit_callbacks) -> KnowledgeBase:
    queued: list[int] = []
    # The test's transaction never commits: run the on-commit enqueue as a commit would.
    with django_capture_on_commit_callbacks(execute=True):
        for name, data in [
            ("handbook.md", HANDBOOK),
            ("deployment.md", DEPLOYMENT),
            ("concrete.md", CONCRETE),
        ]:
            submit_document(kb, name, data, enqueue=queued.append)
    for document_id in queued:
        run_ingestion(document_id)
    assert set(kb.documents.values_list("status", flat=True)) == {DocumentStatus.READY}
    return kb


def playground(kb: KnowledgeBase) -> str:
    return reverse("knowledge-playground", args=[kb.slug])


def search(client, kb, headers=None, **query) -> str:
    response = client.get(playground(kb), query, headers=headers)
    assert response.status_code == 200
    return response.content.decode()


def test_it_requires_login(client, kb):
    response = client.get(playground(kb), {"q": "installer"})
    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))


def test_it_hides_other_users_kbs(bob, kb):
    client = Client()
    client.force_login(bob)
    assert client.get(playground(kb), {"q": "installer"}).status_code == 404
    assert client.get(reverse("knowledge-playground", args=["no-such-kb"])).status_code == 404


def test_it_opens_for_a_reader_of_a_public_kb(bob, ingested_kb):
    # update(), not save(): a stale instance would write back an old content_version.
    KnowledgeBase.objects.filter(pk=ingested_kb.pk).update(visibility=Visibility.PUBLIC)
    client = Client()
    client.force_login(bob)
    assert 'data-leg="bm25"' in search(client, ingested_kb, q="installer")


def test_it_rejects_wrong_method(alice_client, kb):
    assert alice_client.post(playground(kb), {"q": "installer"}).status_code == 405


def test_it_links_to_the_playground_from_the_kb_page(alice_client, kb):
    page = alice_client.get(reverse("knowledge-detail", args=[kb.slug])).content.decode()
    assert f'href="{playground(kb)}"' in page


def test_it_shows_the_form_with_the_kb_settings_before_a_query(alice_client, kb):
    kb.retrieval_settings = {"mode": "multipath", "top_k": 7, "fusion": {"mode": "weighted"}}
    kb.save(update_fields=["retrieval_settings"])
    page = search(alice_client, kb)
    assert "Type a query to see how retrieval answers it" in page
    assert re.search(r'<option value="multipath" selected>', page)
    assert re.search(r'<option value="weighted" selected>', page)
    assert 'name="top_k" value="7"' in page
    # The form works without JavaScript: a plain GET to the same URL.
    assert f'action="{playground(kb)}"' in page and f'hx-get="{playground(kb)}"' in page


@pytest.mark.parametrize("query", ["", "   \t  "])
def test_it_explains_an_empty_query(alice_client, ingested_kb, query):
    page = search(alice_client, ingested_kb, q=query)
    assert "Nothing to search: the query is empty." in page
    assert 'data-leg="' not in page


def test_it_shows_legs_fusion_rerank_final_list_and_gate(alice_client, ingested_kb):
    page = search(alice_client, ingested_kb, q="installer configuration file", mode="hybrid", fusion="rrf", rerank="on")
    assert 'data-leg="bm25"' in page and 'data-leg="vector"' in page
    for heading in ("Timings", "Fused list", "Rerank", "Final list", "Quality gate"):
        assert f"{heading}</h2>" in page
    assert "Cosine 35%" in page and "Jaccard 5%" in page
    assert "RRF, k=60" in page
    handbook = Document.objects.get(kb=ingested_kb, name="handbook.md")
    assert reverse("document-detail", args=[ingested_kb.slug, handbook.pk]) + "#chunk-" in page
    assert "Installation" in page  # the section of the best hit
    verdicts = re.findall(r'class="pg-verdict (is-passed|is-rejected)"', page)
    assert verdicts, "no gate verdicts shown"
    assert re.search(r'<span class="pg-mark" aria-label="(passed|rejected)">[✓✗]</span>', page)
    assert re.search(r"pg-t-bm25.*?BM25 <strong>\d+\.\d\d ms</strong>", page, re.S)


def test_it_shows_the_four_recall_paths_in_multipath_mode(alice_client, ingested_kb):
    page = search(alice_client, ingested_kb, q="installer configuration", mode="multipath")
    assert "Recall paths</h2>" in page
    assert 'data-leg="parent_hybrid"' in page and 'data-leg="child_locator"' in page
    # Untuned over hashing vectors: only the parent hybrid is fused (knowledge.recall.LEXICAL_PATHS).
    assert "weighted RRF w/(60+rank) without bonuses" in page
    assert re.search(r'data-leg="child_locator".*?weight 0 \(not fused\)', page, re.S)

    save_params_for_kb(ingested_kb, RetrievalParams(mode="multipath", paths=PathWeights()))
    page = search(alice_client, ingested_kb, q="installer configuration", mode="multipath")
    assert "weighted RRF w/(60+rank) with bonuses" in page
    assert re.search(r'data-leg="child_locator".*?weight 0.8 ·', page, re.S)


def test_it_says_why_rerank_did_not_run_in_bm25_mode(alice_client, ingested_kb):
    page = search(alice_client, ingested_kb, q="installer configuration", mode="bm25")
    assert 'data-leg="bm25"' in page and 'data-leg="vector"' not in page
    assert "Rerank does not run in BM25 mode" in page
    assert "one leg: its own order" in page


def test_it_starts_from_the_kbs_settings(alice_client, ingested_kb):
    # An untuned KB over hashing vectors: weighted fusion, no rerank (knowledge.retrieval).
    page = search(alice_client, ingested_kb, q="installer configuration")
    assert re.search(r'<option value="weighted" selected>', page)
    assert re.search(r'<option value="off" selected>', page) and "Rerank is off" in page

    ingested_kb.retrieval_settings = {"rerank": True, "fusion": {"mode": "rrf"}}
    ingested_kb.save(update_fields=["retrieval_settings"])
    page = search(alice_client, ingested_kb, q="installer configuration")
    assert "RRF, k=60" in page and "Cosine 35%" in page


def test_it_runs_without_rerank_when_asked(alice_client, ingested_kb):
    page = search(alice_client, ingested_kb, q="installer configuration", mode="hybrid", rerank="off")
    assert "Rerank is off" in page
    assert "Cosine 35%" not in page


def test_it_returns_only_the_partial_to_htmx(alice_client, ingested_kb):
    response = alice_client.get(playground(ingested_kb), {"q": "installer"}, headers=HTMX)
    page = response.content.decode()
    assert page.lstrip().startswith('<section id="playground-results"')
    assert "<html" not in page and "pg-form" not in page
    assert 'data-leg="bm25"' in page
    assert "HX-Request" in response["Vary"]


def test_it_returns_the_whole_page_to_an_htmx_history_restore(alice_client, ingested_kb):
    headers = {**HTMX, "HX-History-Restore-Request": "true"}
    page = search(alice_client, ingested_kb, headers=headers, q="installer")
    assert "<html" in page and 'id="playground-results"' in page


def test_it_warns_when_it_truncates_a_long_query(alice_client, ingested_kb):
    query = ("installer configuration " * 420)[:10_000]
    page = search(alice_client, ingested_kb, q=query)
    assert "The query was truncated to its first 1000 characters." in page
    assert 'data-leg="bm25"' in page


def test_it_truncates_at_the_configured_length(alice_client, ingested_kb, settings):
    settings.RETRIEVAL_MAX_QUERY_CHARS = 50
    page = search(alice_client, ingested_kb, q="installer " * 20)
    assert "truncated to its first 50 characters" in page


def test_it_gives_the_reason_for_a_kb_without_documents(alice_client, kb):
    page = search(alice_client, kb, q="installer")
    assert "The knowledge base has no ready documents." in page
    assert "Fused list</h2>" not in page


@pytest.mark.parametrize("query", ["!!! ... ???", "😀🎉🚀", "——、。！"])
def test_it_answers_punctuation_and_emoji_cleanly(alice_client, ingested_kb, query):
    page = search(alice_client, ingested_kb, q=query, mode="bm25")
    assert "The query has no words to search for." in page
    assert search(alice_client, ingested_kb, q=query, mode="hybrid")  # no exception either


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"mode": "sql"}, "Mode: Select a valid choice."),
        ({"top_k": "0"}, "Top k: Ensure this value is greater than or equal to 1."),
        ({"top_k": "many"}, "Top k: Enter a whole number."),
        ({"fusion": "max"}, "Fusion: Select a valid choice."),
    ],
)
def test_it_reports_invalid_options(alice_client, ingested_kb, option, message):
    page = search(alice_client, ingested_kb, q="installer", **option)
    assert message in page
    assert 'data-leg="' not in page


def test_it_turns_the_form_into_retrieval_params(kb, settings):
    settings.RETRIEVAL_MAX_QUERY_CHARS = 300
    kb.retrieval_settings = {"mode": "vector", "fusion": {"vector_weight": 0.6, "bm25_weight": 0.4}}
    form = PlaygroundForm(_query(q="x", top_k="3", fusion="weighted", rerank="off"), kb=kb)
    assert form.is_valid(), form.errors
    params = form.params()
    assert (params.mode, params.top_k, params.rerank, params.max_query_chars) == ("vector", 3, False, 300)
    assert (params.fusion.mode, params.fusion.vector_weight, params.fusion.bm25_weight) == (
        "weighted",
        0.6,
        0.4,
    )


def _query(**values) -> QueryDict:
    query = QueryDict(mutable=True)
    query.update(values)
    return query
