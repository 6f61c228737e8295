"""The graph explorer: its page, data.json batches and filters, one entity's detail, access rules."""

from __future__ import annotations

import pytest
from django.urls import reverse

from graphrag import explorer, forms
from graphrag.models import Community, Entity, EntityType, GraphBuild, Mention, Relation
from knowledge.models import Chunk, Document, DocumentStatus, KnowledgeBase, Visibility

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def make_document(kb: KnowledgeBase, name: str, *texts: str) -> tuple[Document, list[Chunk]]:
    # Rows as ingestion leaves them, written directly: ingesting would also build a graph.
    document = Document.objects.create(
        kb=kb, name=name, sha256=name, status=DocumentStatus.READY, version=1, live_version=1
    )
    chunks = [
        Chunk.objects.create(
            kb=kb, document=document, version=1, level=Chunk.CHILD, index=index, text=text,
            sha256=f"{name}-{index}",
        )
        for index, text in enumerate(texts)
    ]
    return document, chunks


def make_entity(kb: KnowledgeBase, name: str, **overrides) -> Entity:
    fields = {"key": name.lower(), "type": EntityType.CONCEPT, "mention_count": 1, **overrides}
    return Entity.objects.create(kb=kb, name=name, **fields)


def relate(source: Entity, target: Entity, document: Document, relation: str = "uses", **overrides) -> Relation:
    fields = {"weight": Relation.EXPLICIT, **overrides}
    return Relation.objects.create(
        kb=source.kb, document=document, source=source, target=target, relation=relation, **fields
    )


def urls(kb: KnowledgeBase, entity_pk: int = 1) -> dict[str, str]:
    return {
        "page": reverse("graph-explorer", args=[kb.slug]),
        "data": reverse("graph-data", args=[kb.slug]),
        "entity": reverse("graph-entity", args=[kb.slug, entity_pk]),
    }


@pytest.fixture
def graph(kb):
    """A small graph: GraphRAG uses Redis and networkx, in one community, mentioned in two chunks."""
    document, chunks = make_document(
        kb, "pipeline.md",
        "GraphRAG uses Redis for its sessions.",
        "GraphRAG computes communities with networkx.",
    )
    community = Community.objects.create(
        kb=kb, title="Graph retrieval stack", summary="GraphRAG and the stores it relies on.", size=3
    )
    graphrag = make_entity(kb, "GraphRAG", type=EntityType.FRAMEWORK, mention_count=2, community=community)
    redis = make_entity(kb, "Redis", type=EntityType.STORAGE, community=community)
    networkx = make_entity(kb, "networkx", type=EntityType.TOOL)
    Mention.objects.create(entity=graphrag, chunk=chunks[0], document=document, surface="GraphRAG")
    Mention.objects.create(entity=graphrag, chunk=chunks[1], document=document, surface="GraphRAG")
    Mention.objects.create(entity=redis, chunk=chunks[0], document=document, surface="Redis")
    relate(graphrag, redis, document, "uses", evidence=[chunks[0].pk])
    relate(graphrag, networkx, document, "co_occurs", weight=Relation.CO_OCCURRENCE)
    return {"document": document, "chunks": chunks, "graphrag": graphrag, "redis": redis, "networkx": networkx}


@pytest.fixture
def ranked(kb):
    """Thirty entities, entity-00 the most mentioned, each related to the next."""
    document, _ = make_document(kb, "ranked.md", "text")
    entities = [make_entity(kb, f"entity-{n:02}", mention_count=100 - n) for n in range(30)]
    for first, second in zip(entities, entities[1:], strict=False):
        relate(first, second, document)
    return entities


def data(client, kb, **params) -> dict:
    response = client.get(reverse("graph-data", args=[kb.slug]), params)
    assert response.status_code == 200, response.content
    return response.json()


def ids(entities) -> list[int]:
    return [entity.pk for entity in entities]


# --- access -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["page", "data", "entity"])
def test_it_requires_login(client, graph, kb, name):
    response = client.get(urls(kb, graph["graphrag"].pk)[name])
    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))


@pytest.mark.parametrize("name", ["page", "data", "entity"])
def test_it_hides_another_users_private_kb(bob_client, graph, kb, name):
    assert bob_client.get(urls(kb, graph["graphrag"].pk)[name]).status_code == 404


@pytest.mark.parametrize("name", ["page", "data", "entity"])
def test_it_shows_a_public_kb_to_every_signed_in_user(bob_client, graph, kb, name):
    KnowledgeBase.objects.filter(pk=kb.pk).update(visibility=Visibility.PUBLIC)
    assert bob_client.get(urls(kb, graph["graphrag"].pk)[name]).status_code == 200


@pytest.mark.parametrize("name", ["page", "data", "entity"])
def test_it_rejects_other_methods(alice_client, graph, kb, name):
    assert alice_client.post(urls(kb, graph["graphrag"].pk)[name]).status_code == 405


def test_it_answers_404_for_an_entity_of_another_kb(alice, alice_client, graph, kb):
    other_kb = KnowledgeBase.objects.create(slug="other-kb", name="Other", owner=alice)
    stranger = make_entity(other_kb, "Stranger")

    assert alice_client.get(urls(kb, stranger.pk)["entity"]).status_code == 404
    assert alice_client.get(urls(kb, stranger.pk)["entity"], headers=HTMX).status_code == 404
    assert alice_client.get(urls(other_kb, stranger.pk)["entity"]).status_code == 200


# --- the page -----------------------------------------------------------------------------


def test_it_renders_the_explorer_for_the_owner(alice_client, graph, kb):
    response = alice_client.get(urls(kb)["page"])

    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-url="/kb/alice-kb/graph/data.json"' in html
    assert "vendor/force-graph/force-graph.min.js" in html
    assert "graphrag/explorer.js" in html
    assert html.count('name="type"') == len(EntityType.choices)
    assert 'name="relation" value="uses"' in html
    # Co-occurrence is not one relation among the others but a switch, off while documents state relations.
    assert 'name="relation" value="co_occurs"' not in html
    assert "Co-occurrence links (1)" in html and "data-graph-cooccurrence>" in html
    assert "build_graph" not in html


def test_it_links_the_graph_from_the_kb_page(alice_client, kb):
    response = alice_client.get(reverse("knowledge-detail", args=[kb.slug]))
    assert f'href="{urls(kb)["page"]}"' in response.content.decode()


def test_it_explains_how_to_build_a_graph_when_there_is_none(alice_client, kb):
    make_document(kb, "guide.md", "text")

    html = alice_client.get(urls(kb)["page"]).content.decode()

    assert "has no graph yet" in html
    assert "python manage.py build_graph --kb alice-kb" in html
    assert "builds by itself after documents are ingested" in html
    assert "force-graph.min.js" not in html and "data-graph-canvas" not in html


def test_its_empty_state_says_why_the_last_build_failed(alice_client, kb):
    GraphBuild.objects.create(kb=kb, status=GraphBuild.FAILED, error="the extractor timed out")
    html = alice_client.get(urls(kb)["page"]).content.decode()
    assert "The last graph build failed: the extractor timed out" in html


def test_it_searches_entities_for_htmx(alice_client, graph, kb):
    response = alice_client.get(urls(kb)["page"], {"q": "redi"}, headers=HTMX)

    html = response.content.decode()
    assert html.lstrip().startswith('<ul id="graph-results"')
    assert "Redis" in html and "GraphRAG" not in html
    assert f'hx-get="{urls(kb, graph["redis"].pk)["entity"]}"' in html


def test_it_tells_caches_that_htmx_gets_another_body(alice_client, graph, kb):
    for url in (urls(kb)["page"], urls(kb, graph["redis"].pk)["entity"]):
        assert "HX-Request" in alice_client.get(url, headers=HTMX)["Vary"]
        assert "HX-Request" in alice_client.get(url)["Vary"]


def test_it_searches_without_javascript(alice_client, graph, kb):
    html = alice_client.get(urls(kb)["page"], {"q": "nothing-like-it"}).content.decode()
    assert "<html" in html and "No entity matches “nothing-like-it”" in html


# --- data.json ----------------------------------------------------------------------------


def test_it_sends_nodes_in_batches_most_mentioned_first(alice_client, kb, ranked):
    first = data(alice_client, kb, limit=10)

    assert [node["id"] for node in first["nodes"]] == ids(ranked[:10])
    assert first["total"] == 30 and first["next_offset"] == 10
    assert first["nodes"][0] == {
        "id": ranked[0].pk, "name": "entity-00", "type": "concept", "mentions": 100, "community": None,
    }
    second = data(alice_client, kb, offset=10, limit=10)
    assert [node["id"] for node in second["nodes"]] == ids(ranked[10:20])
    last = data(alice_client, kb, offset=20, limit=10)
    assert len(last["nodes"]) == 10 and last["next_offset"] is None


def test_it_links_a_batch_only_to_nodes_the_client_holds(alice_client, kb, ranked):
    first = data(alice_client, kb, limit=10)
    returned = {node["id"] for node in first["nodes"]}
    assert len(first["links"]) == 9  # the chain within the batch, not entity-09 -> entity-10
    assert all(link["source"] in returned and link["target"] in returned for link in first["links"])

    second = data(alice_client, kb, offset=10, limit=10)
    pairs = {(link["source"], link["target"]) for link in second["links"]}
    assert (ranked[9].pk, ranked[10].pk) in pairs  # joins this batch to the one before
    assert (ranked[19].pk, ranked[20].pk) not in pairs  # the next batch is not loaded yet
    assert len(pairs) == 10


def test_it_caps_the_batch(alice_client, kb, ranked, monkeypatch):
    monkeypatch.setattr(forms, "BATCH", 7)
    monkeypatch.setattr(forms, "MAX_BATCH", 12)

    assert len(data(alice_client, kb)["nodes"]) == 7
    capped = data(alice_client, kb, limit=10_000)
    assert len(capped["nodes"]) == 12 and capped["next_offset"] == 12


def test_it_filters_by_type(alice_client, graph, kb):
    tools = data(alice_client, kb, type="tool")
    assert [node["name"] for node in tools["nodes"]] == ["networkx"] and tools["total"] == 1

    two = data(alice_client, kb, type=["tool", "storage"])
    assert {node["name"] for node in two["nodes"]} == {"networkx", "Redis"}
    assert two["links"] == []  # their relations go through GraphRAG, which is filtered out


def test_it_filters_by_relation(alice_client, graph, kb):
    uses = data(alice_client, kb, relation="uses")

    assert {node["name"] for node in uses["nodes"]} == {"GraphRAG", "Redis"}
    assert uses["links"] == [
        {"source": graph["graphrag"].pk, "target": graph["redis"].pk, "relation": "uses", "weight": 1.0}
    ]


def test_it_leaves_co_occurrence_out_when_asked(alice_client, graph, kb):
    explicit = data(alice_client, kb, links="explicit")

    assert {node["name"] for node in explicit["nodes"]} == {"GraphRAG", "Redis"}
    assert [link["relation"] for link in explicit["links"]] == ["uses"]
    assert {link["relation"] for link in data(alice_client, kb, links="all")["links"]} == {"uses", "co_occurs"}


def test_it_ranks_the_biggest_communities_first_when_asked(alice_client, graph, kb):
    small = Community.objects.create(kb=kb, title="Alone", size=1)
    make_entity(kb, "Milvus", type=EntityType.STORAGE, mention_count=50, community=small)

    assert [node["name"] for node in data(alice_client, kb)["nodes"]][0] == "Milvus"
    ranked = [node["name"] for node in data(alice_client, kb, order="community")["nodes"]]
    assert ranked == ["GraphRAG", "Redis", "Milvus", "networkx"]


def test_it_filters_by_name(alice_client, graph, kb):
    found = data(alice_client, kb, q="NETWORK")
    assert [node["name"] for node in found["nodes"]] == ["networkx"]


def test_it_sends_one_link_per_pair_and_relation(alice_client, graph, kb):
    second, _ = make_document(kb, "second.md", "GraphRAG may use Redis.")
    relate(graph["graphrag"], graph["redis"], second, "uses", weight=Relation.CO_OCCURRENCE)

    links = data(alice_client, kb)["links"]

    uses = [link for link in links if link["relation"] == "uses"]
    assert len(uses) == 1 and uses[0]["weight"] == Relation.EXPLICIT
    co_occurs = [link for link in links if link["relation"] == "co_occurs"]
    assert co_occurs[0]["weight"] == Relation.CO_OCCURRENCE


def test_it_sends_the_strongest_links_first_when_it_caps_them(alice_client, graph, kb, monkeypatch):
    monkeypatch.setattr(explorer, "LINKS_PER_NODE", 1)  # three nodes: at most three of the four links
    more, _ = make_document(kb, "more.md", "GraphRAG depends on Redis, next to networkx.")
    relate(graph["graphrag"], graph["redis"], more, "depends_on")
    relate(graph["redis"], graph["networkx"], more, "co_occurs", weight=Relation.CO_OCCURRENCE)
    relate(graph["redis"], graph["networkx"], graph["document"], "co_occurs", weight=Relation.CO_OCCURRENCE)

    links = data(alice_client, kb)["links"]

    assert {link["relation"] for link in links[:2]} == {"uses", "depends_on"}
    # Of the two co-occurrences, the one two documents state.
    assert links[2:] == [
        {"source": graph["redis"].pk, "target": graph["networkx"].pk, "relation": "co_occurs", "weight": Relation.CO_OCCURRENCE}
    ]


@pytest.mark.parametrize("params", [{"offset": -1}, {"limit": 0}, {"type": "planet"}, {"limit": "many"}])
def test_it_refuses_malformed_parameters(alice_client, graph, kb, params):
    response = alice_client.get(urls(kb)["data"], params)
    assert response.status_code == 400
    assert "errors" in response.json()


def test_its_queries_do_not_grow_with_the_graph(alice_client, kb, ranked, django_assert_max_num_queries):
    # Session, user, KB, count, nodes, links: the same for thirty entities as for thirty thousand.
    with django_assert_max_num_queries(6):
        data(alice_client, kb, limit=30)


# --- one entity ---------------------------------------------------------------------------


def test_it_shows_an_entitys_mentions_neighbours_and_community(alice_client, graph, kb):
    graphrag, document, chunks = graph["graphrag"], graph["document"], graph["chunks"]

    response = alice_client.get(urls(kb, graphrag.pk)["entity"], headers=HTMX)

    html = response.content.decode()
    assert html.lstrip().startswith('<section id="graph-detail"')
    assert f'data-entity-id="{graphrag.pk}"' in html
    for chunk in chunks:
        assert f'href="/kb/alice-kb/documents/{document.pk}/#chunk-{chunk.pk}"' in html
    assert "GraphRAG computes communities with networkx." in html
    assert "2 mentions in 2 chunks" in html
    assert "→ uses" in html and f'data-neighbour-id="{graph["redis"].pk}"' in html
    assert "co_occurs" in html and f'data-neighbour-id="{graph["networkx"].pk}"' in html
    assert "Graph retrieval stack" in html and "GraphRAG and the stores it relies on." in html


def test_it_shows_incoming_relations_from_the_other_side(alice_client, graph, kb):
    html = alice_client.get(urls(kb, graph["redis"].pk)["entity"], headers=HTMX).content.decode()
    assert "← uses" in html and f'data-neighbour-id="{graph["graphrag"].pk}"' in html
    assert 'data-direction="in"' in html


def test_it_renders_an_entity_as_a_page_without_javascript(alice_client, graph, kb):
    html = alice_client.get(urls(kb, graph["networkx"].pk)["entity"]).content.decode()

    assert "<html" in html and "data-graph-canvas" in html
    assert f'data-entity-id="{graph["networkx"].pk}"' in html
    assert "Not in a community" in html


def test_its_entity_queries_are_bounded(alice_client, kb, ranked, django_assert_max_num_queries):
    with django_assert_max_num_queries(8):
        alice_client.get(urls(kb, ranked[5].pk)["entity"], headers=HTMX)


def test_it_escapes_entity_names_and_descriptions(alice_client, graph, kb):
    hostile = "<img src=x onerror=alert(1)>"
    Entity.objects.filter(pk=graph["redis"].pk).update(name=hostile, description=hostile)

    detail = alice_client.get(urls(kb, graph["redis"].pk)["entity"], headers=HTMX).content.decode()
    neighbour = alice_client.get(urls(kb, graph["graphrag"].pk)["entity"], headers=HTMX).content.decode()
    search = alice_client.get(urls(kb)["page"], {"q": "<img"}, headers=HTMX).content.decode()

    for html in (detail, neighbour, search):
        assert hostile not in html
        assert "&lt;img src=x onerror=alert(1)&gt;" in html
