"""Where the database does a search's work, the legs' queries run side by side."""

from __future__ import annotations

import threading

import pytest
from django.db import transaction

from knowledge.memory_index import MemoryBackend
from knowledge.pg_search import PgBackend
from knowledge.retrieval import _legs_side_by_side, _run_legs


def test_the_legs_run_side_by_side_when_asked():
    both_running = threading.Barrier(2, timeout=5)  # breaks unless the two legs run at once

    def leg(hits):
        def run():
            both_running.wait()
            return hits
        return run

    hits = _run_legs({"bm25": leg([(1, 2.0)]), "vector": leg([(2, 0.9)])}, side_by_side=True)

    assert hits == {"bm25": [(1, 2.0)], "vector": [(2, 0.9)]}


def test_one_after_the_other_they_run_on_the_calling_thread():
    caller = threading.current_thread()
    ran_on = []
    job = lambda: ran_on.append(threading.current_thread()) or []  # noqa: E731
    _run_legs({"bm25": job, "vector": job}, side_by_side=False)
    assert ran_on == [caller, caller]


@pytest.mark.django_db(transaction=True)
def test_only_postgresql_outside_a_transaction_runs_them_side_by_side():
    assert _legs_side_by_side(PgBackend())
    assert not _legs_side_by_side(MemoryBackend())
    with transaction.atomic():  # another connection would not see what this one wrote
        assert not _legs_side_by_side(PgBackend())
