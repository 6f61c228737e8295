"""The chat holds a question that names a document to it, and its trace says what the gate rejected;
a passage cut off mid-sentence reaches the answer's evidence with the rest of its sentence."""

from __future__ import annotations

import pytest

from chat.models import Message, Span
from chat.pipeline import ChatOptions, ChatRequest, run_chat
from chat.tests.conftest import DOCS, ingest_docs

pytestmark = pytest.mark.django_db

BREAKER = "breaker.md"


def ask(user, message, events, llm):
    return run_chat(ChatRequest(user, None, message, ChatOptions(kb_slug="alice-kb")), emit=events, llm=llm)


def test_a_named_document_scopes_the_evidence_and_the_trace_shows_the_rejections(kb, alice, extractive, events):
    ingest_docs(kb, {**DOCS, "more-hybrid.md": "# 1 Fusion\n\nHybrid search fuses rankings; the circuit "
                                                 "breaker of hybrid search opens after failures in the window."})

    result = ask(alice, "What does breaker.md say about when the circuit breaker opens in hybrid search?", events, extractive)

    evidence = events.one("retrieval").data["evidence"]
    assert evidence and {item["doc"] for item in evidence} == {BREAKER}
    gate = Span.objects.get(trace__trace_id=result.trace_id, name="kb.gate")
    assert gate.output.startswith("scope breaker.md (named in the question)")
    assert "outside the scope breaker.md: from " in gate.output


def test_a_reference_cut_mid_sentence_reaches_the_evidence_with_its_ending(kb, alice, extractive, events):
    # One sentence longer than a child chunk (400 characters in Chinese) is cut where the chunk
    # fills; the next chunk holds its end, which says how often the worker retries.
    clauses = "，".join(f"摄取进程在第{n}阶段会把解析器的状态与保存的校验和进行比对" for n in range(1, 19))
    ingest_docs(kb, {"ingest.md": f"# 1 重试\n\n解析失败时，{clauses}，并且最多重试七次之后才把文档标记为失败。其他步骤不重试。"})
    chunks = list(kb.chunks.filter(level=1).order_by("index").values_list("text", flat=True))
    assert len(chunks) >= 2 and "七次" not in chunks[0] and not chunks[0].rstrip().endswith("。")

    result = ask(alice, "解析失败时摄取进程会把解析器的状态与什么比对？", events, extractive)

    stored = Message.objects.get(pk=result.message_id)
    cut = [item for item in stored.debug["evidence"] if item["text"].startswith(chunks[0].strip()[:20])]
    assert cut, "the cut chunk is among the evidence"
    assert cut[0]["text"].endswith("最多重试七次之后才把文档标记为失败。")  # the rest of its sentence, no more
    assert cut[0]["chars"] == len(cut[0]["text"]) > len(chunks[0])
