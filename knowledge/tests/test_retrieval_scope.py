"""Retrieval holds a question that names a document or a chapter to it, through the gate."""

from __future__ import annotations

import pytest
from django.test import TestCase

from knowledge.ingest import run_ingestion, submit_document
from knowledge.retrieval import RetrievalParams, retrieve
from knowledge.scope import Scope

pytestmark = pytest.mark.django_db

GATE_TEXT = "The quality gate checks the vector score, the rerank score and the scope of every candidate."
DOCS = {
    "03-retrieval.md": f"# Retrieval\n\n## 6 Quality gate\n\n{GATE_TEXT}\n\n## 7 Budgets\n\n"
    "References are cut to 1500 characters each and 4000 in all.",
    "04-chat.md": f"# Chat\n\n## 1 Gate in chat\n\n{GATE_TEXT} The chat shows the passed references.\n\n"
    "## 3 部署\n\n全栈部署使用 PostgreSQL 和 Redis。",
    "05-notes.md": "# Notes\n\n## 1 Quality\n\nThe quality gate is described in the retrieval guide; the scope check too.",
}


def ingest(kb):
    for name, text in DOCS.items():
        queued: list[int] = []
        with TestCase.captureOnCommitCallbacks(execute=True):
            submit_document(kb, name, text.encode(), enqueue=queued.append)
        run_ingestion(queued[0])


def test_a_question_naming_a_document_gets_references_from_it_only(kb):
    ingest(kb)

    plain = retrieve("quality gate scope check", kb, RetrievalParams())
    scoped = retrieve("What does 03-retrieval.md say about the quality gate scope check?", kb, RetrievalParams())

    assert plain.scope is None and len({c.doc_name for c in plain.references}) > 1
    assert scoped.scope is not None and scoped.scope.doc_names == ("03-retrieval.md",)
    assert scoped.references and {c.doc_name for c in scoped.references} == {"03-retrieval.md"}
    rejected = [v.reason for v in scoped.gate.verdicts if not v.passed]
    assert any(reason.startswith("outside the scope 03-retrieval.md: from ") for reason in rejected)
    assert "scope" in scoped.timings_ms


def test_a_named_chapter_brings_its_chunks_even_when_recall_missed_them(kb):
    ingest(kb)

    result = retrieve("第3章讲了什么？", kb, RetrievalParams())

    assert result.scope is not None and result.scope.chapter == "3"
    assert [c.section_index for c in result.references] == ["3"]
    assert "PostgreSQL" in result.references[0].text


def test_a_scope_chosen_by_a_control_wins_and_an_empty_one_turns_detection_off(kb):
    ingest(kb)
    doc_id = next(c.doc_id for c in retrieve("chat shows the passed references", kb, RetrievalParams()).references
                  if c.doc_name == "04-chat.md")

    chosen = retrieve("What does 03-retrieval.md say about the gate?", kb,
                      RetrievalParams(named_scope=Scope(frozenset({doc_id}), ("04-chat.md",), source="ui")))
    off = retrieve("What does 03-retrieval.md say about the gate?", kb, RetrievalParams(named_scope=Scope()))

    assert {c.doc_name for c in chosen.references} == {"04-chat.md"}
    assert off.scope is None


def test_no_gate_no_scope(kb):
    ingest(kb)

    result = retrieve("What does 03-retrieval.md say about the gate?", kb, RetrievalParams(gate=None))

    assert result.scope is None


def test_a_document_added_or_renamed_after_a_search_can_be_named(kb):
    from knowledge.models import Document

    ingest(kb)
    assert retrieve("What does 06-added.md say about the gate?", kb, RetrievalParams()).scope is None
    queued: list[int] = []
    with TestCase.captureOnCommitCallbacks(execute=True):
        submit_document(kb, "06-added.md", b"# Added\n\n## 1 Gate\n\nThe added guide covers the gate too.",
                        enqueue=queued.append)
    run_ingestion(queued[0])

    added = retrieve("What does 06-added.md say about the gate?", kb, RetrievalParams())
    notes = Document.objects.get(kb=kb, name="05-notes.md")
    notes.name = "05-renamed.md"
    notes.save()
    renamed = retrieve("What does 05-renamed.md say about the quality gate?", kb, RetrievalParams())

    assert added.scope is not None and added.scope.doc_names == ("06-added.md",)
    assert renamed.scope is not None and renamed.scope.doc_names == ("05-renamed.md",)
