"""A model that refuses, errs, hangs or stalls: through the HTTP API the chat answers from the
sources within seconds, and the answer says what happened to the model."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from agentic_rag.llm.config import reset_llm
from agentic_rag.llm.extractive import MODEL_FAILED, MODEL_STOPPED, MODEL_TIMED_OUT
from agentic_rag.llm.testing import FakeReply
from agentic_rag.tests.llm_support import configured_as_the_model
from chat.models import Message

from .test_api import JSON_API, STREAM, parse_sse, post_json
from .web_factories import HANDBOOK, ingest

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "How do we review incidents?"
# Generous for a loaded machine, and still far below the 15 s and more a dead model cost
# before a request had a budget.
WALL_S = 8
NEVER_S = 60.0  # a fake model's "never": the server's stop ends it
BROKEN = {
    "error_500": FakeReply(status=500),
    "hung": FakeReply(headers_delay_s=NEVER_S),
    "stalled": FakeReply(chunks=("Incidents are reviewed ", "in writing."), stall_after=1, stall_s=NEVER_S),
}


@pytest.fixture
def ready_kb(kb, alice):
    ingest(kb, alice)
    return kb


def quotes(answer: str) -> list[str]:
    """The sentences the answer quotes from the handbook, each with its citation mark."""
    found = re.findall(r"([^\n.()\]]+\.) \[\d+\]", answer)
    return [sentence.strip() for sentence in found if sentence.strip() in HANDBOOK.decode()]


@contextmanager
def broken_model(settings, case: str) -> Iterator[None]:
    """The project's one model, broken as case says, for the block (the default timeouts)."""
    if case != "refused":
        with configured_as_the_model(settings, BROKEN[case]):
            yield
        return
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.LLM_PROVIDERS = ["openai"]
    settings.OPENAI_BASE_URL = f"http://127.0.0.1:{port}/v1"
    reset_llm()
    try:
        yield
    finally:
        reset_llm()


def ask(client, endpoint: str) -> tuple[int, dict, list[str], float]:
    """POST the question; return the status, the final answer's fields, the event kinds, the seconds."""
    started = time.monotonic()
    if endpoint == "json":
        response = post_json(client, JSON_API, {"message": QUESTION, "kb": "alice-kb"})
        body, kinds = response.json(), []
    else:
        response = post_json(client, STREAM, {"message": QUESTION, "kb": "alice-kb"})
        events = parse_sse(response.streaming_content)
        kinds = [kind for kind, _ in events]
        final = events[-1][1]
        body = {
            "answer": final.get("response", ""), "status": final.get("status"), "partial": final.get("partial")
        }
    return response.status_code, body, kinds, time.monotonic() - started


@pytest.mark.parametrize("endpoint", ["json", "stream"])
@pytest.mark.parametrize(
    ("case", "label"),
    [("refused", MODEL_FAILED), ("error_500", MODEL_FAILED), ("hung", MODEL_TIMED_OUT)],
)
def test_a_dead_model_leaves_a_labelled_answer_from_the_sources_within_seconds(
    alice_client, ready_kb, settings, endpoint, case, label
):
    # The deployment's stage budgets: a hung model's silence there is its first failure.
    settings.CHAT_STAGE_BUDGETS_MS = {}
    with broken_model(settings, case):
        status, body, kinds, seconds = ask(alice_client, endpoint)

    assert status == 200
    assert seconds < WALL_S, f"{case}: {seconds:.1f} s"
    assert body["answer"].startswith(label["en"]) and quotes(body["answer"])
    assert body["status"] == "done" and not body["partial"]
    assert endpoint == "json" or kinds[-1] == "final"


@pytest.mark.parametrize("endpoint", ["json", "stream"])
def test_a_model_that_stalls_mid_answer_keeps_its_words_and_the_sources_finish_the_answer(
    alice_client, ready_kb, settings, endpoint
):
    # A model that answers every request with the same stream cannot rewrite the query.
    settings.CHAT_ENABLE_QUERY_REWRITE = False
    with broken_model(settings, "stalled"):
        status, body, kinds, seconds = ask(alice_client, endpoint)

    assert status == 200 and "error" not in kinds
    assert seconds < WALL_S, f"{seconds:.1f} s"
    answer = body["answer"]
    assert answer.startswith("Incidents are reviewed ")  # what the model wrote, as it was shown
    assert quotes(answer)
    assert answer.index(MODEL_STOPPED["en"]) < answer.index(quotes(answer)[0])
    assert "in writing." not in answer
    assert body["status"] == "done" and body["partial"]
    stored = Message.objects.get(role="assistant")
    assert stored.partial and stored.content == answer
    assert "stopped mid-answer" in stored.debug["incomplete"]
