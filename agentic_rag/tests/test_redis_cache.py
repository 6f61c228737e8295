"""With Redis down, pages, login and the JSON API still answer: the cache costs a warning, not a 500."""

from __future__ import annotations

import json
import logging
import runpy
from pathlib import Path

import pytest
from django.core.cache import cache
from django.urls import reverse

import agentic_rag
from agentic_rag import redis_cache
from agentic_rag.ratelimit import check_rate

# The chat API answers on a worker thread with its own connection: it must see committed rows.
pytestmark = pytest.mark.django_db(transaction=True)

CLOSED_PORT = "redis://127.0.0.1:1/0"  # nothing listens on port 1: every connection is refused


@pytest.fixture
def redis_down(settings, monkeypatch):
    """The cache settings.py makes for REDIS_URL, aimed at a closed port."""
    monkeypatch.setenv("REDIS_URL", CLOSED_PORT)
    configured = runpy.run_path(str(Path(agentic_rag.__file__).parent / "settings.py"))
    monkeypatch.setattr(redis_cache, "outage", redis_cache.Outage())
    settings.CACHES = configured["CACHES"]
    assert CLOSED_PORT in json.dumps(settings.CACHES)  # the test is about Redis
    # Every level on, so the limiter reads and writes its counters on each request.
    settings.RATE_LIMIT_GLOBAL_QPS, settings.RATE_LIMIT_USER_QPS, settings.RATE_LIMIT_SESSION_QPS = 1000, 10, 5


def test_pages_login_and_the_api_answer_without_redis(redis_down, client, alice, kb, caplog):
    caplog.set_level(logging.WARNING)
    login = client.post(reverse("login"), {"username": "alice", "password": "alice-password"})
    pages = [client.get(url) for url in ("/login/", "/", reverse("knowledge-list"), reverse("knowledge-detail", args=[kb.slug]))]
    reply = client.post(reverse("api-chat"), json.dumps({"message": "What is hybrid search?", "kb": kb.slug}),
                        content_type="application/json")

    assert login.status_code == 302 and login["Location"] != reverse("login")  # signed in: sessions are not in Redis
    assert [page.status_code for page in pages] == [200, 200, 200, 200]
    assert reply.status_code == 200 and reply.json()["answer"]
    # The outage is reported, once, not once per request.
    warnings = [r for r in caplog.records if r.name == "agentic_rag.redis_cache"]
    assert len(warnings) == 1 and "Redis" in warnings[0].getMessage()


def test_a_cache_that_is_down_reads_as_empty_and_drops_writes(redis_down):
    cache.set("k", 1)

    assert cache.get("k", "default") == "default" and cache.add("k", 1) is False
    assert cache.get_many(["k"]) == {} and not cache.has_key("k")
    with pytest.raises(ValueError):
        cache.incr("k")  # as for a missing key, which callers already handle
    assert check_rate(user_id=1, session_key="s").allowed  # the limiter lets requests through


def test_after_a_failure_redis_is_left_alone_for_a_while(redis_down, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(redis_cache, "outage", redis_cache.Outage(clock=lambda: now[0]))
    calls = []
    original = redis_cache.FailSoftRedisCacheClient.get_client
    monkeypatch.setattr(redis_cache.FailSoftRedisCacheClient, "get_client",
                        lambda self, *args, **kwargs: calls.append(1) or original(self, *args, **kwargs))

    cache.get("a")
    cache.get("b")
    now[0] += redis_cache.RETRY_AFTER_S + 1
    cache.get("c")

    assert len(calls) == 2  # the first call and the one after the pause: not the one in between
