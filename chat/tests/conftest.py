"""Fixtures of the chat pipeline tests: a KB with documents, offline and fake-server models."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import TestCase

from agentic_rag.llm import LLMConfig, Timeouts, build_llm
from agentic_rag.llm.testing import FakeOpenAIServer
from chat.events import PipelineEvent
from knowledge.ingest import submit_document
from knowledge.tasks import enqueue_ingestion

DOCS = {
    "hybrid.md": "# 1 Hybrid search\n\nHybrid search fuses the BM25 ranking and the vector ranking with "
    "reciprocal rank fusion. The fused list keeps the best chunks of both legs.\n\n## 1.1 Weights\n\n"
    "The weighted mode scores 0.7 times the vector score plus 0.3 times the BM25 score.",
    "breaker.md": "# 1 Circuit breaker\n\nThe circuit breaker opens when more than 10% of calls fail within "
    "the window. It stays open for five minutes, then lets one probe through.",
    "施工.md": "# 1 施工准备\n\n按照 GB 50204-2015 执行混凝土结构验收。架桥机进场前应完成技术交底。",
}


def ingest_docs(kb, docs: dict[str, str] = DOCS) -> None:
    for name, text in docs.items():
        with TestCase.captureOnCommitCallbacks(execute=True):
            outcome = submit_document(kb, name, text.encode(), enqueue=enqueue_ingestion)
        assert outcome.status == "queued", outcome


@pytest.fixture
def docs_kb(kb):
    """Alice's KB with three small documents, ready to search."""
    ingest_docs(kb)
    return kb


@pytest.fixture
def extractive():
    """The offline router: no model, the extractive generator answers."""
    return build_llm(LLMConfig())


@pytest.fixture
def fake_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


def model_router(server: FakeOpenAIServer, *, chunk_s: float = 5.0, first_token_s: float = 5.0):
    """A router whose one model is the fake server (the extractive generator stays last)."""
    timeouts = Timeouts(connect_s=2, first_token_s=first_token_s, chunk_s=chunk_s, total_s=10)
    config = LLMConfig(
        providers=("openai",), openai_base_url=server.base_url, openai_api_key="test", timeouts=timeouts,
        retry_max_attempts=1,
    )
    return build_llm(config)


class Events(list):
    """An emit callback that keeps what it gets."""

    def __call__(self, event: PipelineEvent) -> None:
        self.append(event)

    def types(self) -> list[str]:
        return [event.type for event in self]

    def of(self, type: str) -> list[PipelineEvent]:
        return [event for event in self if event.type == type]

    def one(self, type: str) -> PipelineEvent:
        found = self.of(type)
        assert len(found) == 1, (type, self.types())
        return found[0]

    def stage_end(self, stage: str) -> dict:
        return next(e.data for e in self if e.type == "stage_end" and e.stage == stage)

    def tokens(self) -> str:
        return "".join(event.data["text"] for event in self.of("token"))


@pytest.fixture
def events() -> Events:
    return Events()
