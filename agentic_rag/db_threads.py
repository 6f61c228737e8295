"""Thread pools whose threads recover from a database connection the server dropped.

A pool thread keeps its Django connection from task to task: Django closes connections at
the end of a request, and these threads serve none. After the server drops one (a restart,
an idle timeout, a failover) every later task on that thread would fail with "the
connection is closed" until the process restarts. So a task first closes its thread's
connection when a query on it failed and it no longer answers; the next query opens a new
one. As with Django's request connections, the task that meets the dropped connection
fails, and the ones after it do not.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from channels.db import DatabaseSyncToAsync
from django.db import connections


class DatabaseThreadPool(ThreadPoolExecutor):
    def submit(self, fn, /, *args: Any, **kwargs: Any) -> Future:
        return super().submit(_on_usable_connections, fn, *args, **kwargs)


def _on_usable_connections(fn, *args: Any, **kwargs: Any) -> Any:
    drop_broken_connections()
    return fn(*args, **kwargs)


def drop_broken_connections() -> None:
    """Close this thread's connections on which a query failed and that no longer answer."""
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None and connection.errors_occurred:
            if connection.is_usable():
                connection.errors_occurred = False
            else:
                connection.close()


def database_sync_to_async(func):
    """channels' database_sync_to_async on a pool of threads, not on the one thread that every
    consumer's thread-sensitive call shares.

    Under 200 chat sessions at once, their rate checks, form checks, admissions and final
    renders queued on that one thread, so every answer arrived at about the end (answers p50
    25-30 s, `bench load --sessions 200`); on the pool, with CHAT_CPU_SLOTS, p50 14.5 s. Each
    call still opens and closes its connection as channels' does (close_old_connections), and
    SQLite queues concurrent writers (IMMEDIATE transactions with a timeout, settings.py).
    """
    return DatabaseSyncToAsync(func, thread_sensitive=False)
