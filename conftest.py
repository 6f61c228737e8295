"""Fixtures shared by every app's tests: alice owns a KB, bob is an outsider."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

# Property tests run derandomized and bounded in `make test` and CI, so a run is repeatable
# and quick; `make fuzz` loads the "fuzz" profile, which searches long with fresh seeds. A
# failure fuzzing finds becomes a regular test (an @example or a plain test case).
hypothesis_settings.register_profile(
    "ci", max_examples=100, derandomize=True, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
hypothesis_settings.register_profile(
    "fuzz", max_examples=500, derandomize=False, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _tasks_run_inline(settings):
    # Tests see the effects of a dispatched task at once; the full-stack tests that
    # need a real worker switch this back to "celery" themselves.
    settings.BACKGROUND_TASKS = "inline"
    # Real password hashing costs ~0.3 s a user; tests need users, not key stretching.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # The dependency-free embedder keeps ingestion in tests fast; tests of the real
    # models ask for them by name.
    settings.EMBEDDER = "hashing-1024"
    settings.EMBEDDER_UPGRADE = ""
    settings.READER_ENCODER = ""  # tests that need the sentence encoder set it
    # Tests fire requests faster than people do; the rate-limit tests switch limits on.
    settings.RATE_LIMIT_GLOBAL_QPS = settings.RATE_LIMIT_USER_QPS = settings.RATE_LIMIT_SESSION_QPS = 0


@pytest.fixture(autouse=True)
def _roomy_stage_budgets(settings):
    # A fake model answers in milliseconds, but a busy CI machine can hold a thread for longer
    # than the rewrite's 500 ms; the tests of the budgets set their own.
    settings.CHAT_STAGE_BUDGETS_MS = {"rewrite": 10_000, "intent": 10_000}


@pytest.fixture(autouse=True)
def _in_memory_channel_layer(request, settings):
    """Consumers' own tests talk over the in-memory layer; the full-stack tests keep Redis.

    A consumer test then depends on no Redis timing: a receive that outlived its socket once
    hung pytest-asyncio's loop close (redis-py lost the cancellation; the project's layer,
    agentic_rag.channel_layers, now ends such a receive). The Redis layer itself is covered by
    the tests marked `fullstack`, which carry progress events between processes over it.
    """
    if request.node.get_closest_marker("fullstack") is None:
        settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


@pytest.fixture(autouse=True)
def _fresh_search_backend():
    # The embedded backend caches indexes by KB id and content_version; test databases
    # reuse both after each rollback, so each test gets its own backend.
    import graphrag.search
    import knowledge.languages
    import knowledge.search

    def forget() -> None:
        knowledge.search._backend = None
        graphrag.search._cache.clear()  # the same goes for the graph's arrays
        knowledge.languages._kb_languages.cache_clear()  # and for a KB's languages

    forget()
    yield
    forget()


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice", password="alice-password")


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user("bob", password="bob-password")


@pytest.fixture
def kb(alice):
    from knowledge.models import KnowledgeBase

    return KnowledgeBase.objects.create(slug="alice-kb", name="Alice's KB", owner=alice)


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


@pytest.fixture
def bob_client(bob):
    from django.test import Client

    client = Client()
    client.force_login(bob)
    return client


@pytest.fixture(scope="session", autouse=True)
def _drop_lingering_connections(django_db_setup, django_db_blocker):
    """Let the test database be dropped on PostgreSQL at the end of the run.

    Pool threads (the chat's parallel stages, the similarity scans) keep their connections
    for the life of the process, and PostgreSQL refuses to drop a database in use."""
    yield
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
