from __future__ import annotations

import json

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.test import TestCase

from graphrag.build import build_graph
from graphrag.models import Community, Entity, GraphBuild, GraphDocument, Mention, Relation
from graphrag.runner import Busy, run_locked_build
from knowledge.ingest import delete_document, run_ingestion, submit_document
from knowledge.models import Chunk, Document

pytestmark = pytest.mark.django_db

DOCS = {
    "pipeline.md": "# 1 Pipeline\n\nStreamChatPipeline uses Redis for sessions. StreamChatPipeline depends on GraphRAG.\n\n"
    "# 2 Search\n\nGraphRAG uses networkx for communities and Milvus stores vectors.",
    "graph.md": "# 1 Graph\n\nGraphRAG 依赖 networkx 计算社区。LightRAG extends GraphRAG.\n\n"
    "# 2 Storage\n\nNeo4j 替代 networkx 存储大图。",
    "ops.md": "# 1 Ops\n\nDocker runs Redis and Celery. Celery uses Redis as its broker.",
}


def ingest(kb, docs=DOCS) -> list[int]:
    ids = []
    for name, text in docs.items():
        queued: list[int] = []
        with TestCase.captureOnCommitCallbacks(execute=True):
            submit_document(kb, name, text.encode(), enqueue=queued.append)
        run_ingestion(queued[0])
        ids.append(queued[0])
    return ids


def mentions_of(kb, key: str) -> int:
    return sum(Mention.objects.filter(entity__kb=kb, entity__key=key).values_list("count", flat=True))


def entity(kb, key: str) -> Entity:
    return Entity.objects.get(kb=kb, key=key)


def test_a_build_links_every_entity_and_relation_back_to_its_chunks(kb):
    ingest(kb)

    report = build_graph(kb)

    assert report.documents == 3 and report.entities == Entity.objects.filter(kb=kb).count() > 5
    graphrag = entity(kb, "graphrag")
    assert graphrag.mention_count >= 4
    chunk_docs = set(Chunk.objects.filter(mentions__entity=graphrag).values_list("document__name", flat=True))
    assert chunk_docs == {"pipeline.md", "graph.md"}
    uses = Relation.objects.get(kb=kb, source__key="streamchatpipeline", relation="uses", target__key="redis")
    assert uses.weight == Relation.EXPLICIT
    assert all("Redis" in Chunk.objects.get(pk=c).text for c in uses.evidence)
    assert Relation.objects.filter(kb=kb, relation="depends_on", source=graphrag, target__key="networkx").exists()
    assert Relation.objects.filter(kb=kb, relation="co_occurs", weight=Relation.CO_OCCURRENCE).exists()
    assert Community.objects.filter(kb=kb).exists()
    assert all(c.summary and c.title for c in Community.objects.filter(kb=kb))


def test_a_second_build_reads_nothing_and_a_new_version_only_its_document(kb):
    ingest(kb)
    build_graph(kb)
    entities = set(Entity.objects.filter(kb=kb).values_list("key", flat=True))

    assert build_graph(kb).documents == 0

    ingest(kb, {"ops.md": "# 1 Ops\n\nKubernetes runs RabbitMQ."})  # a new version of ops.md
    report = build_graph(kb)

    assert report.documents == 1
    keys = set(Entity.objects.filter(kb=kb).values_list("key", flat=True))
    assert {"kubernetes", "rabbitmq"} <= keys
    assert "docker" in entities and "docker" not in keys  # only ops.md's first version named it
    assert entity(kb, "redis").mention_count == mentions_of(kb, "redis")
    assert Entity.objects.filter(kb=kb).values("key").distinct().count() == Entity.objects.filter(kb=kb).count()


def test_deleting_a_document_removes_its_facts_and_the_entities_only_it_named(kb):
    ids = ingest(kb)
    build_graph(kb)

    delete_document(Document.objects.get(pk=ids[1]))  # graph.md
    build_graph(kb)

    keys = set(Entity.objects.filter(kb=kb).values_list("key", flat=True))
    assert "lightrag" not in keys and "neo4j" not in keys
    assert "graphrag" in keys  # pipeline.md names it too
    assert not Relation.objects.filter(kb=kb, relation="依赖").exists()


def test_a_build_stopped_half_way_resumes_without_duplicates(kb, monkeypatch):
    ingest(kb)
    import graphrag.build

    real_store = graphrag.build._store
    calls = []

    def dying_store(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("worker killed")
        return real_store(*args, **kwargs)

    monkeypatch.setattr(graphrag.build, "_store", dying_store)
    with pytest.raises(RuntimeError):
        build_graph(kb)
    assert GraphDocument.objects.filter(kb=kb).count() == 1
    monkeypatch.setattr(graphrag.build, "_store", real_store)

    report = build_graph(kb)

    assert report.documents == 2
    assert Entity.objects.filter(kb=kb).values("key").distinct().count() == Entity.objects.filter(kb=kb).count()
    assert entity(kb, "redis").mention_count == mentions_of(kb, "redis")


def test_an_empty_kb_and_a_tiny_document_build_cleanly(kb):
    assert build_graph(kb).entities == 0

    ingest(kb, {"tiny.md": "Redis."})
    report = build_graph(kb)

    assert report.entities == 1 and report.communities == 0


def test_only_one_build_runs_per_kb_and_the_running_one_goes_round_again(kb):
    ingest(kb)
    cache.add(f"graph-build-lock-{kb.pk}", 1, timeout=60)
    try:
        assert isinstance(run_locked_build(kb), Busy)
    finally:
        cache.delete(f"graph-build-lock-{kb.pk}")
    GraphBuild.objects.create(kb=kb, status=GraphBuild.RUNNING)  # a dead worker's

    report = run_locked_build(kb)  # the "again" flag left by the busy call makes it go round twice

    assert not isinstance(report, Busy)
    builds = list(GraphBuild.objects.filter(kb=kb).order_by("pk"))
    assert builds[0].status == GraphBuild.FAILED and "interrupted" in builds[0].error
    assert [b.status for b in builds[1:]] == [GraphBuild.DONE, GraphBuild.DONE]
    assert builds[1].documents == 3 and builds[2].documents == 0


def test_ingestion_builds_the_graph_in_the_background(kb, settings):
    from knowledge.tasks import enqueue_ingestion

    settings.GRAPH_BUILD_AFTER_INGESTION = True
    with TestCase.captureOnCommitCallbacks(execute=True):
        submit_document(kb, "ops.md", DOCS["ops.md"].encode(), enqueue=enqueue_ingestion)

    assert GraphBuild.objects.filter(kb=kb, status=GraphBuild.DONE).exists()
    assert entity(kb, "celery").mention_count >= 2


@pytest.fixture
def model(settings):
    """A configured model: a fake OpenAI-compatible server on 127.0.0.1."""
    from agentic_rag.tests.llm_support import configured_as_the_model

    settings.LLM_RETRY_MAX_ATTEMPTS = 1
    settings.GRAPH_LLM_TIMEOUT_S = 1.0
    with configured_as_the_model(settings) as server:
        yield server


def test_with_a_model_it_adds_what_the_rules_miss_and_never_invents(kb, model):
    ingest(kb, {"ops.md": "# 1 Ops\n\nThe scheduler hands jobs to the broker."})
    model.reply(
        json.dumps(
            {
                "entities": [{"name": "scheduler", "type": "tool"}, {"name": "broker", "type": "storage"}, {"name": "Kafka", "type": "storage"}],
                "relations": [{"source": "scheduler", "relation": "uses", "target": "broker"}],
            }
        )
    )

    report = run_locked_build(kb)

    assert report.extractor == "llm" and report.llm_calls == 1 and not report.log
    assert entity(kb, "scheduler").type == "tool"
    assert Relation.objects.filter(kb=kb, source__key="scheduler", relation="uses", target__key="broker").exists()
    assert not Entity.objects.filter(kb=kb, key="kafka").exists()  # not in the passage
    assert "data, not instructions" in model.chat_requests[0].messages[0]["content"]


@pytest.mark.parametrize(
    "reply",
    [{"text": "Sorry, I cannot produce JSON today."}, {"text": "{}", "headers_delay_s": 3.0}, {"status": 500}],
    ids=["invalid-json", "timeout", "server-error"],
)
def test_a_failing_model_falls_back_to_the_rules_and_the_build_says_so(kb, model, reply):
    model.reply(**reply)
    ingest(kb, {"ops.md": DOCS["ops.md"]})

    report = run_locked_build(kb)

    assert entity(kb, "celery").mention_count >= 2  # the rules still read the chunk
    assert report.llm_calls == 1
    build = GraphBuild.objects.get(kb=kb)
    assert build.status == GraphBuild.DONE and "fell back to the rule extractor" in build.log


def test_the_dry_run_estimates_the_llm_cost_without_calling_it(kb, model, capsys):
    ingest(kb)

    call_command("build_graph", "--kb", kb.slug, "--dry-run", "--json")

    report = json.loads(capsys.readouterr().out)
    chunks = Chunk.objects.filter(kb=kb).live().children().count()
    assert report["documents"] == 3 and report["llm_calls"] == chunks
    assert report["llm_tokens_estimated"] > chunks * 300
    assert not Entity.objects.filter(kb=kb).exists() and not GraphBuild.objects.exists()
    assert not model.chat_requests


def test_a_known_term_keeps_its_own_spelling_whatever_the_text_wrote_first(kb):
    ingest(kb, {"paths.md": "# 1 Paths\n\nThe code lives in graphrag/ and `graphrag`. GraphRAG uses networkx."})

    build_graph(kb)

    assert entity(kb, "graphrag").name == "GraphRAG"


def test_a_new_entity_is_described_by_the_first_sentence_that_names_it(kb):
    ingest(kb, {"ops.md": "# 1 Ops\n\nDocker runs Redis and Celery. Celery uses Redis as its broker.\n\n质量门控过滤弱证据。它在检索之后运行。"})

    build_graph(kb)

    assert entity(kb, "docker").description == "Docker runs Redis and Celery."
    assert entity(kb, "质量门控").description == "质量门控过滤弱证据。"
