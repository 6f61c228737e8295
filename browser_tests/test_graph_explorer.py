"""In a real browser: a KB's graph on the canvas, more of it on demand, filters, and one entity's
mentions, neighbours and community opened from the search box."""

from __future__ import annotations

import os
import re
from pathlib import Path

from playwright.sync_api import Page, expect

from .conftest import USERNAME, _manage
from .test_upload import create_kb, log_in

FILLERS = 520  # past one batch of 500, so "Show more" has something to fetch

# Rows as a build leaves them, written with the ORM: the canvas, not the extractor, is under test.
SEED = """
from django.contrib.auth import get_user_model
from graphrag.models import Community, Entity, Mention, Relation
from knowledge.models import Chunk, Document, KnowledgeBase

owner = get_user_model().objects.get(username={username!r})
kb = KnowledgeBase.objects.create(slug="graph-kb", name="Pipeline graph", owner=owner)
document = Document.objects.create(
    kb=kb, name="pipeline.md", sha256="seed", status="ready", version=1, live_version=1, chunk_count=3
)
parent = Chunk.objects.create(
    kb=kb, document=document, version=1, level=Chunk.PARENT, index=0, section_title="Pipeline",
    text="GraphRAG uses Redis for sessions. GraphRAG depends on networkx. Milvus stores vectors.",
    sha256="p0",
)
texts = [
    "GraphRAG uses Redis for sessions.",
    "GraphRAG depends on networkx for communities.",
    "Milvus stores the vectors next to Redis.",
]
chunks = [
    Chunk.objects.create(
        kb=kb, document=document, version=1, level=Chunk.CHILD, index=i, parent=parent, text=text,
        section_title="Pipeline", sha256=f"c{{i}}",
    )
    for i, text in enumerate(texts)
]
stack = Community.objects.create(
    kb=kb, title="Retrieval storage", size=3,
    summary="GraphRAG keeps its sessions in Redis and its vectors in Milvus.",
)
def entity(name, type, mentions, community=None):
    return Entity.objects.create(
        kb=kb, name=name, key=name.lower(), type=type, mention_count=mentions, community=community
    )
graphrag = entity("GraphRAG", "framework", 40, stack)
redis = entity("Redis", "storage", 30, stack)
networkx = entity("networkx", "tool", 20)
milvus = entity("Milvus", "storage", 10, stack)
for chunk, names in zip(chunks, [(graphrag, redis), (graphrag, networkx), (milvus, redis)]):
    for named in names:
        Mention.objects.create(entity=named, chunk=chunk, document=document, surface=named.name)
def relate(source, target, relation, weight=1.0):
    Relation.objects.create(
        kb=kb, document=document, source=source, target=target, relation=relation, weight=weight
    )
relate(graphrag, redis, "uses")
relate(graphrag, networkx, "depends_on")
relate(milvus, redis, "co_occurs", 0.5)
types = ["technology", "concept", "stage", "shortcut", "layer", "metric", "priority", "model"]
fillers = Entity.objects.bulk_create(
    Entity(kb=kb, name=f"term-{{n:03}}", key=f"term-{{n:03}}", type=types[n % len(types)], mention_count=1)
    for n in range({fillers})
)
Relation.objects.bulk_create(
    Relation(kb=kb, document=document, source=a, target=b, relation="co_occurs", weight=0.5)
    for a, b in zip(fillers, fillers[1:])
)
"""


def seed_graph(tmp_path_factory) -> None:
    # The server fixture serves the database of the session's "var" directory: seed that one.
    var_dir = next(path for path in tmp_path_factory.getbasetemp().glob("var*") if (path / "daphne.log").exists())
    env = {**os.environ, "VAR_DIR": str(var_dir), "EMBEDDER": "hashing-1024", "EMBEDDER_UPGRADE": ""}
    for name in ("REDIS_URL", "DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
        env.pop(name, None)
    _manage(env, "shell", "-c", SEED.format(username=USERNAME, fillers=FILLERS))


def test_it_explores_a_kbs_graph(page: Page, tmp_path_factory, screenshots: Path):
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    log_in(page)
    seed_graph(tmp_path_factory)

    page.goto("/kb/graph-kb/")
    page.get_by_role("link", name="Graph", exact=True).click()
    page.wait_for_url("**/kb/graph-kb/graph/")
    graph = page.locator("[data-graph]")
    expect(page.locator("[data-graph-canvas] canvas").first).to_be_visible()
    # It opens on the relations documents state, co-occurrence links off behind a switch.
    status = page.locator("[data-graph-status]")
    expect(status).to_contain_text("Showing 3 of 3 entities · 2 links")
    switch = page.get_by_role("switch", name=re.compile(r"Co-occurrence links \(520\)"))
    expect(switch).not_to_be_checked()
    expect(graph).to_have_attribute("data-layout", "still", timeout=30_000)
    page.wait_for_timeout(600)  # the zoom to fit
    page.screenshot(path=str(screenshots / "graph-explorer-default.png"))
    page.set_viewport_size({"width": 390, "height": 844})
    expect(switch).to_be_visible()
    page.screenshot(path=str(screenshots / "graph-explorer-default-390.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})

    switch.check()
    total = FILLERS + 4
    expect(graph).to_have_attribute("data-loaded", "500")
    expect(status).to_contain_text(f"Showing 500 of {total} entities")

    more = page.locator("[data-graph-more]")
    expect(more).to_have_text(f"Show {total - 500} more")
    more.click()
    expect(graph).to_have_attribute("data-loaded", str(total))
    expect(status).to_contain_text(f"Showing {total} of {total} entities")
    expect(more).to_be_hidden()
    expect(graph).to_have_attribute("data-layout", "still", timeout=30_000)
    page.wait_for_timeout(600)  # the zoom to fit
    page.screenshot(path=str(screenshots / "graph-explorer-overview.png"))

    # Selecting a search result opens the panel a click on the node opens.
    page.fill("#graph-q", "graphr")
    page.locator("#graph-results a", has_text="GraphRAG").click()
    detail = page.locator("#graph-detail")
    expect(detail.get_by_role("heading", name="GraphRAG")).to_be_visible()
    expect(graph).to_have_attribute("data-selected", detail.get_attribute("data-entity-id"))
    mentions = detail.locator(".graph-mention")
    expect(mentions).to_have_count(2)
    expect(mentions.first).to_contain_text("pipeline.md")
    expect(detail).to_contain_text("GraphRAG depends on networkx for communities.")
    neighbours = detail.locator(".graph-neighbour")
    expect(neighbours).to_have_count(2)
    expect(neighbours.filter(has_text="Redis")).to_contain_text("→ uses")
    expect(neighbours.filter(has_text="networkx")).to_contain_text("→ depends_on")
    expect(detail.locator(".graph-community")).to_contain_text("Retrieval storage")
    expect(detail.locator(".graph-community")).to_contain_text("its vectors in Milvus")
    expect(graph).to_have_attribute("data-layout", "still", timeout=30_000)
    page.wait_for_timeout(800)  # the camera's glide to the selection
    page.screenshot(path=str(screenshots / "graph-explorer.png"))

    # A neighbour opens its own panel, with the relation seen from its side.
    neighbours.filter(has_text="Redis").get_by_role("link").click()
    expect(detail.get_by_role("heading", name="Redis")).to_be_visible()
    expect(detail.locator(".graph-neighbour", has_text="GraphRAG")).to_contain_text("← uses")
    expect(detail.locator(".graph-neighbour", has_text="Milvus")).to_contain_text("co_occurs")

    # Filters ask the server again: without tools, networkx leaves the canvas.
    page.locator("input[name=type][value=tool]").uncheck()
    expect(status).to_contain_text(f"Showing 500 of {total - 1} entities")
    expect(graph).to_have_attribute("data-loaded", "500")

    page.click("[data-theme-toggle]")
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    expect(graph).to_have_attribute("data-layout", "still", timeout=30_000)
    page.wait_for_timeout(800)
    page.screenshot(path=str(screenshots / "graph-explorer-dark.png"))
    page.click("[data-theme-toggle]")

    # A mention opens the chunk it was read from on the document page.
    detail.locator(".graph-mention-doc").first.click()
    page.wait_for_url(re.compile(r"/kb/graph-kb/documents/\d+/#chunk-\d+$"))
    expect(page.locator(":target")).to_contain_text("Redis")
    assert errors == []


def test_it_says_how_to_build_a_graph_when_there_is_none(page: Page, screenshots: Path):
    log_in(page)
    create_kb(page, "no-graph-kb", "Not built yet")
    page.get_by_role("link", name="Graph", exact=True).click()
    page.wait_for_url("**/kb/no-graph-kb/graph/")
    empty = page.locator(".graph-empty")
    expect(empty).to_contain_text("This knowledge base has no graph yet.")
    expect(empty).to_contain_text("python manage.py build_graph --kb no-graph-kb")
    expect(empty).to_contain_text("builds by itself after documents are ingested")
    expect(page.locator("[data-graph-canvas]")).to_have_count(0)
    page.screenshot(path=str(screenshots / "graph-explorer-empty.png"))
