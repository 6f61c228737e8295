"""Run Celery tasks where the deployment wants them, and notify websocket groups.

The full stack sends tasks to a broker. The embedded default has no broker, so tasks run
in-process on one background thread: requests never wait for them, and writes to SQLite
stay serialised. When the ASGI server's event loop is known, that thread is started from
the loop, so progress events published from it reach the in-memory channel layer on the
loop its consumers listen on.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from celery import Task
from celery.exceptions import Reject
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import close_old_connections, connections

from agentic_rag.shutdown import is_stop_requested, request_stop, wait_for_stop

log = logging.getLogger(__name__)

# One thread per Celery queue, so a long re-embedding never holds up ingestion while
# writes within a queue stay serialised.
_executors: dict[str, ThreadPoolExecutor] = {}
_executors_lock = threading.Lock()


def _executor_for(task: Task) -> ThreadPoolExecutor:
    queue = settings.CELERY_TASK_ROUTES.get(task.name, {}).get("queue", settings.CELERY_TASK_DEFAULT_QUEUE)
    with _executors_lock:
        if queue not in _executors:
            _executors[queue] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"background-{queue}")
        return _executors[queue]


_server_loop: asyncio.AbstractEventLoop | None = None


def remember_server_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Record the ASGI server's event loop for in-process tasks."""
    global _server_loop
    _server_loop = loop


def dispatch(task: Task, *args: Any) -> None:
    """Run `task(*args)` by the BACKGROUND_TASKS mode: celery, thread or inline.

    With the broker down, a task runs in this process as in the embedded default, so an upload
    is ingested anyway instead of failing the request that made it."""
    mode = settings.BACKGROUND_TASKS
    if mode == "celery":
        try:
            task.delay(*args)
        except Exception:  # a broker or result store that is down: this process does the work
            log.warning("could not hand %s%r to the broker; running it in this process", task.name, args, exc_info=True)
            _run_in_background(task, args)
    elif mode == "inline":
        _apply(task, args)
    else:
        _run_in_background(task, args)


def _run_in_background(task: Task, args: tuple[Any, ...]) -> None:
    if is_stop_requested():
        log.info("not starting %s%r: the process is stopping; the next start resumes it", task.name, args)
        return
    loop = _server_loop
    if loop is not None and loop.is_running() and not loop.is_closed():
        runner = sync_to_async(_apply_in_background, thread_sensitive=False, executor=_executor_for(task))
        asyncio.run_coroutine_threadsafe(runner(task, args), loop)
    else:
        _executor_for(task).submit(_apply_in_background, task, args)


def _apply(task: Task, args: tuple[Any, ...]) -> None:
    result = task.apply(args=args)
    if result.failed():
        log.error("task %s%r failed: %s", task.name, args, result.traceback)


def _apply_in_background(task: Task, args: tuple[Any, ...]) -> None:
    # The background thread owns its connections; inline, they are the caller's.
    try:
        _apply(task, args)
    finally:
        close_old_connections()


def stop_background_work(reason: str) -> None:
    """Halt the running in-process tasks at their next batch boundary and drop the queued ones."""
    request_stop(reason)
    with _executors_lock:
        executors = list(_executors.values())
    for executor in executors:
        # Python's exit joins these threads: without cancel_futures it would run the queue dry.
        executor.shutdown(wait=False, cancel_futures=True)


def postpone(task: Task, args: tuple[Any, ...]) -> None:
    """Hand back a task that stopped at a batch boundary because its process is stopping.

    From a worker, the broker delivers it again (acks_late); in-process, the server's next
    start resumes the work from what the database says is unfinished.
    """
    if not task.request.is_eager:
        raise Reject(f"{task.name}{args!r}: the worker is shutting down", requeue=True) from None
    log.info("%s%r stopped for shutdown; the next start resumes it", task.name, args)


def start_sweeper(sweep: Callable[[], object], interval_s: float) -> threading.Thread:
    """Call `sweep` every `interval_s` seconds on a daemon thread, until the process stops.

    Every server and worker process runs one, so the sweep needs no process of its own
    (no Celery beat); what it does must be safe with several sweepers at once.
    """

    def sweep_until_stopped() -> None:
        while not wait_for_stop(interval_s):
            try:
                sweep()
            except Exception:  # a database that is away now may be back for the next round
                log.exception("background sweep %s failed", getattr(sweep, "__name__", sweep))
            finally:
                connections.close_all()  # this thread's own, idle for a whole interval

    sweeper = threading.Thread(target=sweep_until_stopped, name="background-sweeper", daemon=True)
    sweeper.start()
    return sweeper


def notify_group(group: str, message: dict[str, Any]) -> None:
    """Send a channel-layer message to a group; a delivery failure never fails the caller."""
    layer = get_channel_layer()
    if layer is None:
        return
    if _server_loop is not None and is_stop_requested():
        # In-process, async_to_sync sends through the server's loop, which stops now: the
        # call would wait for ever. Nobody is left listening anyway.
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:  # progress is best effort: the database holds the truth
        log.warning("could not notify group %s", group, exc_info=True)
