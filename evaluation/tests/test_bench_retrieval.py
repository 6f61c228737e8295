"""`manage.py bench retrieval`: a generated corpus, searched, its numbers reported."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.db import connection

from knowledge.models import Chunk, KnowledgeBase

pytestmark = pytest.mark.django_db


def test_it_searches_a_generated_corpus_and_times_embedding_apart(settings):
    settings.EMBEDDER = "hashing-1024"
    out = io.StringIO()

    call_command("bench", "retrieval", "--chunks", "120", "--queries", "5", "--json", stdout=out, stderr=io.StringIO())

    report = json.loads(out.getvalue())
    kb = KnowledgeBase.objects.get(slug="bench-synthetic-120-hashing-1024")
    assert Chunk.objects.filter(kb=kb, level=Chunk.CHILD).count() == 120
    assert report["chunks_searchable"] == 150 and report["queries"] == 5  # 120 children under 30 parents
    search, embedding, total = (report[key] for key in
                                ("search_ms (without query embedding)", "query_embedding_ms", "total_ms"))
    assert search["p50"] > 0 and embedding["p50"] > 0 and total["p50"] >= search["p50"]
    postprocessing = report["postprocessing_ms_100_candidates"]
    assert 0 < postprocessing["p50"] <= postprocessing["p95"]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL only (DATABASE_URL)")
def test_the_planner_sees_the_generated_rows_before_the_first_query():
    call_command("bench", "retrieval", "--chunks", "120", "--queries", "1", "--json", stdout=io.StringIO(),
                 stderr=io.StringIO())

    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE relname = 'knowledge_searchentry'")
        assert cursor.fetchone()[0] >= 150


def _hnsw_definition(dims: int) -> str | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [f"knowledge_searchentry_hnsw_{dims}"])
        row = cursor.fetchone()
        return row[0] if row else None


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL only (DATABASE_URL)")
@pytest.mark.django_db(transaction=True)  # as the command runs: no index is built inside a transaction
def test_a_first_load_of_its_dimension_builds_the_hnsw_index_after_the_rows(monkeypatch):
    from evaluation import retrieval_bench

    definition = _hnsw_definition(1024)
    index_present_during_load: list[bool] = []
    write_document = retrieval_bench._write_document

    def write(*args, **kwargs):
        index_present_during_load.append(_hnsw_definition(1024) is not None)
        return write_document(*args, **kwargs)

    monkeypatch.setattr(retrieval_bench, "_write_document", write)
    call_command("bench", "retrieval", "--chunks", "120", "--queries", "1", "--json", stdout=io.StringIO(),
                 stderr=io.StringIO())

    assert definition is not None and index_present_during_load and not any(index_present_during_load)
    assert _hnsw_definition(1024) == definition

    # A second KB of that dimension goes into the index as it stands: others search it.
    index_present_during_load.clear()
    call_command("bench", "retrieval", "--chunks", "120", "--queries", "1", "--kb", "second", "--json",
                 stdout=io.StringIO(), stderr=io.StringIO())
    assert index_present_during_load and all(index_present_during_load)
