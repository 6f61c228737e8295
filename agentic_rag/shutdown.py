"""Stop a process cleanly: background work halts at a batch boundary, and the process exits.

The long loops (ingestion stages, embedding batches, the graph's documents) call
`at_batch_boundary()` between units of work they commit whole. Once `request_stop()` has
been called (SIGTERM to daphne, a Celery worker's warm shutdown) it raises StopRequested
there, and the task hands its work back: to the broker, which delivers it again, or to the
next start of the server, which resumes it from the database as it does after a crash.

A batch boundary is also where a run shows it is alive: work that registers a beat with
`beating()` (ingestion's heartbeat, knowledge.liveness) has it called there.

A request thread stuck in user code cannot be stopped that way, and Python's exit waits
for it: `start_watchdog` ends the process anyway once a grace period has passed.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import FrameType

from django.conf import settings

log = logging.getLogger(__name__)

_stop = threading.Event()
# Called at each batch boundary of the work running in this context (see `beating`).
_beat: ContextVar[Callable[[], None] | None] = ContextVar("batch_beat", default=None)


class StopRequested(Exception):
    """The process is stopping: leave the rest of this work to the next run."""


def request_stop(reason: str) -> bool:
    """Ask background work to stop at its next batch boundary; False if already asked."""
    if _stop.is_set():
        return False
    _stop.set()
    log.info("stop requested (%s): background work stops at its next batch boundary", reason)
    return True


def is_stop_requested() -> bool:
    return _stop.is_set()


def reset() -> None:
    """Forget a stop request (tests: a real process never starts work again after one)."""
    _stop.clear()


def wait_for_stop(timeout: float) -> bool:
    """Wait up to `timeout` seconds for a stop request; return whether one came."""
    return _stop.wait(timeout)


def at_batch_boundary() -> None:
    """Raise StopRequested when the process is stopping; else call the work's beat, if any."""
    delay = settings.BACKGROUND_BATCH_DELAY_S
    if delay:
        _stop.wait(delay)  # the test hook: hold work half-done, but never delay a stop
    if _stop.is_set():
        raise StopRequested
    beat = _beat.get()
    if beat is not None:
        beat()  # may raise too: the work learns there that it should end


@contextmanager
def beating(beat: Callable[[], None]) -> Iterator[None]:
    """Call `beat` at every batch boundary reached inside the block (in this thread or task)."""
    token = _beat.set(beat)
    try:
        yield
    finally:
        _beat.reset(token)


def exit_now(code: int) -> None:
    """End the process at once, after flushing the log handlers that os._exit would cut off."""
    logging.shutdown()
    sys.stderr.flush()
    os._exit(code)


def start_watchdog(grace_s: float, *, exit: Callable[[int], object] = exit_now) -> threading.Thread:
    """Exit the process after `grace_s` seconds, whatever still runs, saying what it abandons.

    A daemon thread, so a process that ends in time ends without waiting for it. Only
    committed transactions survive a forced exit; every write of background work is in one.
    """

    def expire() -> None:
        time.sleep(grace_s)
        log.warning(
            "still running %.1f s after the stop request; exiting by force, abandoning: %s",
            grace_s,
            "; ".join(describe_threads()) or "nothing (the interpreter was finishing)",
        )
        exit(1)

    watchdog = threading.Thread(target=expire, name="shutdown-watchdog", daemon=True)
    watchdog.start()
    return watchdog


def describe_threads() -> list[str]:
    """Each live non-daemon thread that holds the exit, with where it is: its innermost frame
    in the project's code when it has one (a view, a task), else its innermost frame."""
    frames = sys._current_frames()
    described = []
    for thread in threading.enumerate():
        if thread.daemon or thread is threading.current_thread() or thread is threading.main_thread():
            continue
        frame = frames.get(thread.ident)
        if frame is not None and _is_idle_pool_thread(frame):
            continue  # the exit wakes and ends it
        described.append(f"{thread.name}{_where(frame) if frame else ''}")
    return described


def _is_idle_pool_thread(frame: FrameType) -> bool:
    return frame.f_code.co_name == "_worker" and frame.f_code.co_filename.endswith("concurrent/futures/thread.py")


def _where(innermost: FrameType) -> str:
    frame: FrameType | None = innermost
    while frame is not None and not _is_project_code(frame.f_code.co_filename):
        frame = frame.f_back
    shown = frame or innermost
    return f" at {shown.f_code.co_filename}:{shown.f_lineno} in {shown.f_code.co_name}"


def _is_project_code(filename: str) -> bool:
    return filename.startswith(str(settings.BASE_DIR)) and "site-packages" not in filename


def when_daphne_stops(callback: Callable[[], None]) -> bool:
    """Call `callback` as daphne's reactor begins to stop (SIGTERM, SIGINT); False without daphne.

    The trigger runs before daphne's own, which waits for every open request to finish.
    """
    if "daphne.server" not in sys.modules:  # another server, or a test importing the app
        return False
    from twisted.internet import reactor

    reactor.addSystemEventTrigger("before", "shutdown", callback)
    return True


def when_daphne_starts(callback: Callable[[], None]) -> bool:
    """Call `callback` in daphne's reactor thread as it starts serving; False without daphne.

    Daphne (4.x) has no ASGI lifespan support, so this is how the server's own process, and
    no management command or test that imports the application, runs work at start.
    """
    if "daphne.server" not in sys.modules:
        return False
    from twisted.internet import reactor

    reactor.callWhenRunning(callback)
    return True
