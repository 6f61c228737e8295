"""Rate limits: the global bucket, the user and session windows, 429 over HTTP, the websocket refusal."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.core.cache import cache
from django.test import Client
from django.urls import reverse

from agentic_rag.asgi import application
from agentic_rag.models import ApiToken
from agentic_rag.ratelimit import check_rate
from chat.models import Conversation
from chat.tests.web_factories import session_cookie


@pytest.fixture(autouse=True)
def _empty_cache():
    cache.clear()
    yield
    cache.clear()


def limits(settings, *, global_qps=0, user_qps=0, session_qps=0):
    settings.RATE_LIMIT_GLOBAL_QPS = global_qps
    settings.RATE_LIMIT_USER_QPS = user_qps
    settings.RATE_LIMIT_SESSION_QPS = session_qps


def at(second: float):
    return lambda: second


def test_the_global_bucket_holds_its_tokens_for_a_second_then_refills(settings):
    limits(settings, global_qps=3)

    decisions = [check_rate(user_id=n, clock=at(100.5)) for n in range(4)]

    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert decisions[-1].level == "global" and decisions[-1].retry_after_s == 1
    assert check_rate(user_id=9, clock=at(101.0)).allowed


def test_the_user_window_slides_over_the_second_boundary(settings):
    limits(settings, user_qps=2)

    assert [check_rate(1, clock=at(200.9)).allowed for _ in range(3)] == [True, True, False]
    # At 201.2, 80% of the previous second is still in the window: 3 × 0.8 + 1 > 2.
    refused = check_rate(1, clock=at(201.2))
    assert not refused.allowed and refused.level == "user"
    assert check_rate(2, clock=at(201.2)).allowed  # another user has a window of their own
    assert check_rate(1, clock=at(202.95)).allowed  # the window has moved on


def test_the_session_window_limits_one_session_not_the_user(settings):
    limits(settings, session_qps=1)

    assert check_rate(1, "s1", clock=at(300.5)).allowed
    refused = check_rate(1, "s1", clock=at(300.6))
    assert not refused.allowed and refused.level == "session" and "session limit 1/s" in refused.message
    assert check_rate(1, "s2", clock=at(300.6)).allowed


def test_zero_switches_every_level_off(settings):
    limits(settings)

    assert all(check_rate(1, "s", clock=at(400.1)).allowed for _ in range(50))


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["api-chat", "api-chat-stream", "chat-send"])
def test_it_answers_429_json_with_retry_after_over_http(settings, alice, name):
    limits(settings, user_qps=2)
    client = Client()
    client.force_login(alice)
    url = reverse(name)

    statuses = [client.post(url, {"message": ""}).status_code for _ in range(3)]

    assert 429 not in statuses[:2] and statuses[2] == 429
    response = client.post(url, {"message": ""})
    assert response.status_code == 429 and response["Retry-After"] == "1"
    assert response.json()["error"] == {"message": response.json()["error"]["message"], "code": "rate_limited",
                                        "level": "user"}


@pytest.mark.django_db
def test_it_limits_api_tokens_as_sessions(settings, alice):
    limits(settings, session_qps=1)
    key = ApiToken.issue(alice, "tests")[1]
    client = Client()
    headers = {"Authorization": f"Bearer {key}"}

    first = client.post(reverse("api-chat"), "{}", content_type="application/json", headers=headers)
    second = client.post(reverse("api-chat"), "{}", content_type="application/json", headers=headers)

    assert first.status_code == 400 and second.status_code == 429
    assert second.json()["error"]["level"] == "session"


@pytest.mark.django_db(transaction=True)
async def test_the_websocket_refuses_a_message_over_the_limit(settings, alice):
    limits(settings, user_qps=1)
    cookie = await _cookie(alice)
    check_rate(alice.pk)  # this second's quota is used up
    headers = [(b"origin", b"http://127.0.0.1"), (b"cookie", cookie.encode())]
    communicator = WebsocketCommunicator(application, "/ws/chat/", headers=headers)
    connected, _ = await communicator.connect()
    assert connected

    await communicator.send_to(text_data=json.dumps({"message": "what is 1+1?", "kb": "auto"}))
    echoed = await communicator.receive_from(timeout=5)
    refused = await communicator.receive_from(timeout=5)
    assert await communicator.receive_nothing(timeout=0.5)  # no stage ran
    await communicator.disconnect()

    turn = re.search(r'id="turn-(\w+)"', echoed).group(1)  # the question shows at once
    assert "Too many requests (user limit 1/s)" in refused and "msg-refused" in refused
    assert f"#turn-{turn}" in refused  # said under the question
    assert not await database_sync_to_async(Conversation.objects.exists)()  # refused, not started


async def _cookie(user) -> str:
    return await database_sync_to_async(session_cookie)(user)


COUNT_ALLOWED = """
import os, sys
import django
django.setup()
from agentic_rag.ratelimit import check_rate
now, who = float(sys.argv[1]), sys.argv[2]
print(sum(check_rate(who, clock=lambda: now).allowed for _ in range(10)))
"""


@pytest.mark.fullstack
@pytest.mark.skipif(not django_settings.REDIS_URL, reason="needs REDIS_URL: limits shared through Redis")
def test_the_limits_hold_across_two_processes():
    who = f"user-{uuid.uuid4().hex}"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agentic_rag.settings", "RATE_LIMIT_GLOBAL_QPS": "0",
           "RATE_LIMIT_USER_QPS": "7", "RATE_LIMIT_SESSION_QPS": "0"}
    now = str(int(time.time()) + 0.5)
    command = [sys.executable, "-c", COUNT_ALLOWED, now, who]
    processes = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]

    allowed = [int(process.communicate(timeout=60)[0].strip()) for process in processes]

    assert sum(allowed) == 7  # one window of 7 between them, not 7 each
