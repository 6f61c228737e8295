"""Pipeline events for HTTP clients: Server-Sent Events (sync and async) and one JSON result.

An SSE stream always ends with a `final` or an `error` event, never a cut; while the
pipeline is quiet a `: ping` comment keeps proxies from closing the connection. Closing
a stream early (the client went away) closes the pipeline's generator, which cancels the
run and stores the partial answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import queue
import threading
from collections.abc import AsyncIterator, Iterable, Iterator

from django.db import connections

from .events import PipelineEvent
from .pipeline import ChatRefused, ChatResult, fold_events

logger = logging.getLogger(__name__)

HEARTBEAT_S = 10.0
PING = ": ping\n\n"
TERMINAL = frozenset({"final", "error"})
INTERNAL_ERROR = "The answer failed on the server; its trace has the details."
INCOMPLETE = "The answer stream ended before its final event."


def sse_event(event: PipelineEvent) -> str:
    """Encode one event as `event: <type>` and one `data:` line of JSON."""
    payload = dict(event.data)
    if event.stage:
        payload.setdefault("stage", event.stage)
    if event.ms:
        payload.setdefault("ms", round(event.ms, 3))
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str)
    return f"event: {event.type}\ndata: {data}\n\n"


def error_event(error: BaseException | None) -> PipelineEvent:
    """Turn an exception (None: a stream that just stopped) into the `error` event it ends with."""
    if error is None:
        return PipelineEvent("error", data={"message": INCOMPLETE, "code": "incomplete"})
    if isinstance(error, ChatRefused):
        return PipelineEvent("error", data={"message": str(error), "code": getattr(error, "code", "refused")})
    return PipelineEvent("error", data={"message": INTERNAL_ERROR, "code": "internal"})


def sse_stream(events: Iterator[PipelineEvent], *, heartbeat_s: float = HEARTBEAT_S) -> Iterator[str]:
    """Stream events as SSE from a thread that runs the pipeline, pinging while it is quiet."""
    inbox: queue.Queue = queue.Queue()
    stop = threading.Event()
    pump = threading.Thread(target=_pump, args=(events, inbox, stop), name="sse-pump", daemon=True)
    pump.start()
    try:
        yield from _drain(inbox, heartbeat_s)
    finally:
        stop.set()  # the pump closes the pipeline's generator at its next event


def _pump(events: Iterator[PipelineEvent], inbox: queue.Queue, stop: threading.Event) -> None:
    try:
        for event in events:
            inbox.put(("event", event))
            if stop.is_set():
                break
    except Exception as error:
        if not isinstance(error, ChatRefused):
            logger.exception("chat stream failed")
        inbox.put(("error", error))
    finally:
        with contextlib.suppress(Exception):
            events.close()  # type: ignore[attr-defined]
        inbox.put(("end", None))
        connections.close_all()


def _drain(inbox: queue.Queue, heartbeat_s: float) -> Iterator[str]:
    ended = False
    while True:
        try:
            kind, item = inbox.get(timeout=heartbeat_s)
        except queue.Empty:
            yield PING
            continue
        if kind == "end":
            if not ended:
                yield sse_event(error_event(None))
            return
        if not ended:
            event = item if kind == "event" else error_event(item)
            ended = event.type in TERMINAL
            yield sse_event(event)


async def asse_stream(
    events: AsyncIterator[PipelineEvent], *, heartbeat_s: float = HEARTBEAT_S
) -> AsyncIterator[str]:
    """Stream events as SSE on the event loop, pinging while the pipeline is quiet.

    After the terminal event the pipeline is still drained to its end, as `_drain` does
    for the sync stream: the run stores its exchange and schedules its memory work after
    `final`, and the response must not end while that work still writes to the database.
    """
    pending: asyncio.Future | None = None
    ended = False
    try:
        while True:
            pending = pending or asyncio.ensure_future(events.__anext__())
            done, _ = await asyncio.wait({pending}, timeout=heartbeat_s)
            if not done:
                if not ended:
                    yield PING
                continue
            finished, pending = pending, None
            try:
                event = finished.result()
            except StopAsyncIteration:
                if not ended:
                    yield sse_event(error_event(None))
                return
            except Exception as error:
                if not isinstance(error, ChatRefused):
                    logger.exception("chat stream failed")
                if not ended:
                    yield sse_event(error_event(error))
                return
            if not ended:
                ended = event.type in TERMINAL
                yield sse_event(event)
    finally:
        if pending is not None:  # the client left while the pipeline was busy
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        with contextlib.suppress(Exception):
            await events.aclose()  # type: ignore[attr-defined]


def collect(events: Iterable[PipelineEvent]) -> ChatResult:
    """Read a run's events to the end into its result; a failure becomes the result's error."""
    seen: list[PipelineEvent] = []
    try:
        seen.extend(events)
    except Exception as error:
        if isinstance(error, ChatRefused) and not seen:
            raise  # refused before it started: the caller answers 400
        logger.exception("chat run failed")
        seen.append(error_event(error))
    if not any(event.type in TERMINAL for event in seen):
        seen.append(error_event(None))
    return fold_events(seen)
