"""Run a chat in a worker thread and hand its events to a sync or async consumer as they come.

The request is admitted first (in `iter_chat` at once; in `aiter_chat` on the first
`__anext__`), so a refused request raises ChatRefused before any event. Closing the
iterator (the client went away) sets `cancelled`: the worker stops streaming at the next
token and stores what it had as a partial message. A failure inside the run ends the
events with an `error` event, never with an exception.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from django.db import close_old_connections, connection

from agentic_rag.db_threads import database_sync_to_async
from chat.events import PipelineEvent

from .options import ChatRequest
from .runner import default_collaborators, run_admitted, run_chat
from .store import Admitted, admit

logger = logging.getLogger("chat.pipeline")

_DONE = object()


def iter_chat(request: ChatRequest, *, llm: Any = None) -> Iterator[PipelineEvent]:
    """Yield the events of one chat as the worker thread emits them; raise ChatRefused at once."""
    admitted = admit(request)
    return _events(admitted, llm)


def _events(admitted: Admitted, llm: Any) -> Iterator[PipelineEvent]:
    events: queue.SimpleQueue[Any] = queue.SimpleQueue()
    cancel = threading.Event()
    _start_worker(admitted, llm, events.put, cancel)
    try:
        while (event := events.get()) is not _DONE:
            yield event
    finally:
        cancel.set()


async def aiter_chat(request: ChatRequest, *, llm: Any = None) -> AsyncIterator[PipelineEvent]:
    """The same for async consumers; ChatRefused is raised by the first `__anext__`."""
    admitted = await database_sync_to_async(admit)(request)
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[Any] = asyncio.Queue()
    cancel = threading.Event()

    def put(item: Any) -> None:
        try:
            loop.call_soon_threadsafe(events.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody listens any more
            cancel.set()

    _start_worker(admitted, llm, put, cancel)
    try:
        while (event := await events.get()) is not _DONE:
            yield event
    finally:
        cancel.set()


def _start_worker(admitted: Admitted, llm: Any, put: Callable[[Any], None], cancel: threading.Event) -> None:
    thread = threading.Thread(
        target=_work, args=(admitted, llm, put, cancel), name="chat-run", daemon=True
    )
    thread.start()


def _work(admitted: Admitted, llm: Any, put: Callable[[Any], None], cancel: threading.Event) -> None:
    close_old_connections()
    try:
        run_admitted(admitted, emit=put, collaborators=default_collaborators(llm=llm), cancelled=cancel.is_set)
    except Exception as error:  # run_admitted reports its own failures; this is the last net
        logger.exception("the chat worker failed")
        put(PipelineEvent("error", data={"message": str(error) or type(error).__name__, "code": "internal"}))
    finally:
        put(_DONE)
        connection.close()


__all__ = ["aiter_chat", "iter_chat", "run_chat"]
