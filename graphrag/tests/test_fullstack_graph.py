"""Graph builds in real Celery workers on Redis and PostgreSQL (skipped on the embedded default)."""

from __future__ import annotations

import pytest

from graphrag.models import Entity, GraphBuild
from graphrag.tasks import build_knowledge_graph
from knowledge.tests.test_fullstack import (
    FULL_STACK,
    poll,
    running_worker,
    submit,
    wait_until_finished,
)

pytestmark = [
    pytest.mark.fullstack,
    pytest.mark.skipif(not FULL_STACK, reason="full stack only: needs PostgreSQL and REDIS_URL (see .ci/run)"),
]

TEXT = b"# 1 Ops\n\nCelery uses Redis as its broker. Docker runs Redis and Celery.\n\n# 2 Graph\n\nLightRAG extends GraphRAG."


@pytest.fixture(scope="module")
def celery_worker(request, django_db_setup):
    """A worker that builds graphs after ingestion (the knowledge tests' worker does not)."""
    yield from running_worker(request, build_graphs=True)


@pytest.fixture(scope="module")
def second_worker(request, celery_worker, django_db_setup):
    yield from running_worker(request, build_graphs=True)


@pytest.fixture(autouse=True)
def _workers_idle_after_each_test(request, _django_db_helper):
    # A build still writing when the test ends would deadlock the flush of the test database;
    # depending on the database fixture makes this wait run before its flush.
    yield
    for name in ("celery_worker", "second_worker"):
        if name in request.fixturenames:
            request.getfixturevalue(name).wait_until_idle()


@pytest.mark.django_db(transaction=True)
def test_a_worker_builds_the_graph_after_it_ingests(settings, kb, celery_worker):
    settings.BACKGROUND_TASKS = "celery"

    document = wait_until_finished(submit(kb, "ops.md", TEXT).pk, celery_worker)

    build = poll(
        lambda: GraphBuild.objects.filter(kb=kb, status=GraphBuild.DONE).first(),
        timeout=60, what="the graph build after ingestion", worker=celery_worker,
    )
    assert build.documents == 1 and document.status == "ready"
    assert Entity.objects.filter(kb=kb, key__in=["celery", "redis", "lightrag"]).count() == 3


@pytest.mark.django_db(transaction=True)
def test_two_workers_never_build_one_kb_at_the_same_time(settings, kb, celery_worker, second_worker):
    settings.BACKGROUND_TASKS = "celery"
    for name in ("a.md", "b.md", "c.md"):  # each ingestion also asks the workers for a build
        wait_until_finished(submit(kb, name, TEXT.replace(b"Ops", name.encode())).pk, celery_worker)

    results = [build_knowledge_graph.delay(kb.pk, True) for _ in range(4)]
    # A task that finds the KB's build running retries after the lock's lifetime (10 s here).
    poll(lambda: all(r.ready() for r in results), timeout=120, what="the four builds", worker=celery_worker)
    assert all(r.successful() for r in results)

    builds = list(GraphBuild.objects.filter(kb=kb, status=GraphBuild.DONE).order_by("started_at"))
    assert builds
    for earlier, later in zip(builds, builds[1:], strict=False):
        assert earlier.finished_at <= later.started_at  # one at a time
    keys = list(Entity.objects.filter(kb=kb).values_list("key", flat=True))
    assert len(keys) == len(set(keys)) and "graphrag" in keys
