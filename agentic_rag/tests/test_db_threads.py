"""Pool threads replace a database connection the server dropped instead of failing forever."""

from __future__ import annotations

import pytest
from django.db import InterfaceError, OperationalError, connection

from agentic_rag import db_threads
from agentic_rag.db_threads import DatabaseThreadPool, drop_broken_connections


class FakeConnection:
    def __init__(self, *, failed: bool, answers: bool) -> None:
        self.connection = object()  # opened
        self.errors_occurred = failed
        self.answers = answers
        self.closed = False

    def is_usable(self) -> bool:
        return self.answers

    def close(self) -> None:
        self.closed = True


def _with_connections(monkeypatch, *fakes: FakeConnection) -> None:
    class Connections:
        def all(self, initialized_only=False):
            return list(fakes)

    monkeypatch.setattr(db_threads, "connections", Connections())


def test_a_connection_whose_query_failed_and_that_no_longer_answers_is_closed(monkeypatch):
    broken, healthy = FakeConnection(failed=True, answers=False), FakeConnection(failed=False, answers=True)
    _with_connections(monkeypatch, broken, healthy)
    drop_broken_connections()
    assert broken.closed and not healthy.closed


def test_a_connection_that_still_answers_after_a_failed_query_is_kept(monkeypatch):
    survived = FakeConnection(failed=True, answers=True)  # a query failed, not the connection
    _with_connections(monkeypatch, survived)
    drop_broken_connections()
    assert not survived.closed and not survived.errors_occurred


def _backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL only (DATABASE_URL)")
@pytest.mark.django_db(transaction=True)
def test_a_pool_thread_opens_a_new_connection_after_the_server_dropped_its_own():
    pool = DatabaseThreadPool(max_workers=1)
    dropped = pool.submit(_backend_pid).result(timeout=10)
    with connection.cursor() as cursor:  # as a database restart or an idle timeout would
        cursor.execute("SELECT pg_terminate_backend(%s)", [dropped])

    with pytest.raises((InterfaceError, OperationalError)):
        pool.submit(_backend_pid).result(timeout=10)  # the task that meets it fails, as a request would
    replaced = pool.submit(_backend_pid).result(timeout=10)

    assert replaced != dropped
    pool.shutdown()


async def test_consumers_database_calls_run_side_by_side():
    """Two sessions' calls proceed together: on the one shared thread the second would wait
    for the first, which here waits for the second."""
    import asyncio
    import threading

    from agentic_rag.db_threads import database_sync_to_async

    both_in = threading.Barrier(2, timeout=5)

    @database_sync_to_async
    def call() -> int:
        both_in.wait()
        return threading.get_ident()

    first, second = await asyncio.gather(call(), call())
    assert first != second
