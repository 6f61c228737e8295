"""SSE encoding, heartbeats and clean endings, and the JSON summary: no database, fake event sources."""

from __future__ import annotations

import asyncio
import json
import threading
import time

from chat.adapters import PING, asse_stream, collect, sse_event, sse_stream
from chat.events import PipelineEvent
from chat.pipeline import ChatRefused

SESSION = PipelineEvent("session", data={"session_id": "s1", "conversation_id": 1})
FINAL = PipelineEvent("final", ms=12.5, data={"trace_id": "t1", "response": "Hi [1]", "total_ms": 12.5})


def test_it_encodes_an_event_as_one_sse_message():
    text = sse_event(PipelineEvent("token", stage="generate", data={"text": "多行\n文本"}))
    event, data, blank = text.split("\n", 2)
    assert event == "event: token" and blank == "\n"
    assert json.loads(data.removeprefix("data: ")) == {"text": "多行\n文本", "stage": "generate"}


def test_it_pings_while_the_pipeline_is_quiet():
    def slow():
        yield SESSION
        time.sleep(0.35)
        yield FINAL

    chunks = list(sse_stream(slow(), heartbeat_s=0.1))
    assert chunks[0].startswith("event: session")
    assert chunks.count(PING) >= 2
    assert chunks[-1].startswith("event: final")


def test_it_ends_a_failing_stream_with_an_error_event():
    def failing():
        yield SESSION
        raise ValueError("secret internals")

    chunks = list(sse_stream(failing(), heartbeat_s=1))
    assert chunks[-1].startswith("event: error")
    assert '"code":"internal"' in chunks[-1] and "secret" not in chunks[-1]


def test_it_ends_a_stream_that_just_stops_with_an_error_event():
    chunks = list(sse_stream(iter([SESSION]), heartbeat_s=1))
    assert chunks[-1].startswith("event: error") and '"code":"incomplete"' in chunks[-1]


def test_it_passes_a_refusal_on_with_its_code():
    def refused():
        raise ChatRefused("The message is empty.", code="empty")
        yield  # pragma: no cover

    chunks = list(sse_stream(refused(), heartbeat_s=1))
    assert chunks == ['event: error\ndata: {"message":"The message is empty.","code":"empty"}\n\n']


def test_it_closes_the_pipeline_when_the_client_leaves():
    closed = threading.Event()

    def endless():
        try:
            while True:
                yield PipelineEvent("token", data={"text": "x"})
                time.sleep(0.01)
        finally:
            closed.set()

    stream = sse_stream(endless(), heartbeat_s=1)
    next(stream)
    stream.close()
    assert closed.wait(2)


async def test_it_pings_and_ends_cleanly_under_asgi():
    async def slow():
        yield SESSION
        await asyncio.sleep(0.35)
        yield FINAL

    chunks = [chunk async for chunk in asse_stream(slow(), heartbeat_s=0.1)]
    assert chunks[0].startswith("event: session") and chunks.count(PING) >= 2
    assert chunks[-1].startswith("event: final")


async def test_it_drains_the_async_pipeline_after_its_final_event():
    # The run stores its exchange and schedules memory work after `final`; the response
    # must not end (and a test's database teardown must not start) while that runs.
    after_final_done = asyncio.Event()

    async def with_work_after_final():
        yield SESSION
        yield FINAL
        await asyncio.sleep(0.2)
        yield PipelineEvent("token", data={"text": "late"})
        after_final_done.set()

    chunks = [chunk async for chunk in asse_stream(with_work_after_final(), heartbeat_s=0.05)]
    assert after_final_done.is_set()
    assert chunks[-1].startswith("event: final") and PING not in chunks and "late" not in "".join(chunks)


async def test_it_ends_a_failing_async_stream_with_an_error_event():
    async def failing():
        yield SESSION
        raise RuntimeError("boom")

    chunks = [chunk async for chunk in asse_stream(failing(), heartbeat_s=1)]
    assert chunks[-1].startswith("event: error") and '"code":"internal"' in chunks[-1]


async def test_it_cancels_the_async_pipeline_when_the_client_leaves():
    cancelled = asyncio.Event()

    async def waiting():
        yield SESSION
        try:
            await asyncio.sleep(30)
        finally:
            cancelled.set()
        yield FINAL  # pragma: no cover

    stream = asse_stream(waiting(), heartbeat_s=5)
    assert (await stream.__anext__()).startswith("event: session")
    consumer = asyncio.ensure_future(stream.__anext__())
    await asyncio.sleep(0.05)
    consumer.cancel()  # the ASGI server cancels the response when the client disconnects
    await asyncio.wait_for(cancelled.wait(), 2)


def test_it_reads_a_run_into_the_json_apis_result():
    events = [
        SESSION,
        PipelineEvent("route", data={"kb_prefix": "kb"}),
        PipelineEvent("intent", stage="intent", data={"intents": [{"name": "KB", "confidence": 0.9}]}),
        PipelineEvent("stage_end", stage="memory", ms=1.25, data={"status": "done"}),
        PipelineEvent("tool", data={"name": "calculator"}),
        PipelineEvent("first_token", ms=9.0),
        PipelineEvent("token", data={"text": "Hi "}),
        PipelineEvent("token", data={"text": "[1]"}),
        FINAL,
    ]
    summary = collect(events).as_json()
    assert summary["session_id"] == "s1" and summary["answer"] == "Hi [1]" and summary["trace_id"] == "t1"
    assert summary["route"] == {"kb_prefix": "kb"} and summary["intent"]["intents"][0]["name"] == "KB"
    assert summary["stages"] == [{"name": "memory", "ms": 1.25, "status": "done", "detail": ""}]
    assert summary["tools"] == [{"name": "calculator"}] and summary["first_token_ms"] == 9.0
    assert summary["error"] is None


def test_it_keeps_the_partial_answer_of_a_failed_run():
    events = [
        SESSION,
        PipelineEvent("token", data={"text": "Half"}),
        PipelineEvent("error", data={"message": "x", "code": "llm_timeout"}),
    ]
    result = collect(events)
    assert result.answer == "Half" and result.status == "failed"
    assert result.as_json()["error"] == {"message": "x", "code": "llm_timeout"}


def test_a_stream_that_stops_without_an_ending_is_an_error():
    result = collect([SESSION, PipelineEvent("token", data={"text": "Hal"})])
    assert result.answer == "Hal" and result.error_code == "incomplete"


def test_a_run_that_raises_midway_keeps_what_it_had():
    def events():
        yield SESSION
        yield PipelineEvent("token", data={"text": "Half"})
        raise RuntimeError("boom")

    result = collect(events())
    assert result.session_id == "s1" and result.answer == "Half" and result.error_code == "internal"
