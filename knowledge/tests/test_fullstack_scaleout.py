"""Scale-out on the full stack: two daphne processes and a Celery worker sharing PostgreSQL
and Redis, as a deployment with several web processes runs.

An upload sent to one process shows its progress on a page connected to the other, a user's
rate limit counts the requests of both, and a model added on one is used by the other.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from http.cookies import SimpleCookie

import pytest
from django.conf import settings as django_settings
from django.db import connection

from agentic_rag.llm.testing import FakeOpenAIServer
from agentic_rag.models import ApiToken
from chat.tests.web_factories import session_cookie
from evaluation.load_bench import open_websocket, read_text, start_servers, stop_servers
from knowledge.models import Document, DocumentStatus

from .factories import GUIDE_MD
from .test_fullstack import FULL_STACK, database_url, running_worker

pytestmark = [
    pytest.mark.fullstack,
    pytest.mark.skipif(
        not FULL_STACK,
        reason="full stack only: needs DATABASE_URL on PostgreSQL and REDIS_URL (see .ci/run)",
    ),
]

USER_QPS = 2
# Ask the local servers directly, whatever proxy the environment names.
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture(scope="module")
def celery_worker(request, django_db_setup):
    yield from running_worker(request)


@pytest.fixture(scope="module")
def two_servers(django_db_setup):
    env = {
        **os.environ,
        "DATABASE_URL": database_url(connection.settings_dict),
        "REDIS_URL": django_settings.REDIS_URL,
        "BACKGROUND_TASKS": "celery",
        "EMBEDDER": "hashing-1024",
        "EMBEDDER_UPGRADE": "",
        "GRAPH_BUILD_AFTER_INGESTION": "0",
        "RATE_LIMIT_USER_QPS": str(USER_QPS),
        "VAR_DIR": tempfile.mkdtemp(prefix="scaleout-"),
    }
    servers = start_servers(2, env=env)
    yield [url for url, _ in servers]
    stop_servers(servers)


def _page(url: str, path: str, cookie: str) -> tuple[str, str]:
    """A page's HTML and the CSRF token its forms carry."""
    with DIRECT.open(urllib.request.Request(f"{url}{path}", headers={"Cookie": cookie})) as page:
        jar = SimpleCookie(page.headers.get("Set-Cookie", ""))
        html = page.read().decode()
    token = jar["csrftoken"].value if "csrftoken" in jar else re.search(r'"X-CSRFToken": "([^"]+)"', html).group(1)
    return html, token


def _upload(url: str, kb_slug: str, cookie: str, name: str, data: bytes) -> int:
    """Send a file as the KB page's form does (with its CSRF token); return the status."""
    _, token = _page(url, f"/kb/{kb_slug}/", cookie)
    boundary = uuid.uuid4().hex
    body = (
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"{name}\"\r\n"
        f"Content-Type: text/markdown\r\n\r\n"
    ).encode() + data + f"\r\n--{boundary}--\r\n".encode()
    request = urllib.request.Request(
        f"{url}/kb/{kb_slug}/upload/", data=body, method="POST",
        headers={
            "Cookie": f"{cookie}; csrftoken={token}", "X-CSRFToken": token, "Referer": f"{url}/kb/{kb_slug}/",
            "Content-Type": f"multipart/form-data; boundary={boundary}",
        },
    )  # fmt: skip
    with DIRECT.open(request) as response:
        return response.status


@pytest.mark.django_db(transaction=True)
def test_an_upload_to_one_process_shows_its_progress_on_a_page_open_on_the_other(kb, alice, two_servers, celery_worker):
    first, second = two_servers
    cookie = session_cookie(alice)

    async def watch_and_upload() -> list[str]:
        reader, writer = await open_websocket(second, f"/ws/kb/{kb.slug}/", cookie)
        try:
            frames = [await asyncio.wait_for(read_text(reader, writer), 10)]  # the table, as it was
            status = await asyncio.to_thread(_upload, first, kb.slug, cookie, "guide.md", GUIDE_MD.encode())
            assert status == 200
            while not any('data-status="ready"' in frame for frame in frames):
                frames.append(await asyncio.wait_for(read_text(reader, writer), 60))
            return frames
        finally:
            writer.close()

    frames = asyncio.run(watch_and_upload())

    document = Document.objects.get(kb=kb, name="guide.md")
    assert document.status == DocumentStatus.READY
    row = f'id="document-{document.pk}"'
    statuses = [re.search(r'data-status="(\w+)"', f).group(1) for f in frames if row in f and "data-status" in f]
    assert statuses[-1] == "ready" and len(statuses) >= 2  # progress, not just the end


@pytest.mark.django_db(transaction=True)
def test_a_users_rate_limit_counts_the_requests_sent_to_both_processes(alice, two_servers):
    _, key = ApiToken.issue(alice, "scale-out")
    body = json.dumps({"message": "hello", "kb": "auto"}).encode()

    def ask(url: str) -> int:
        request = urllib.request.Request(
            f"{url}/api/chat", data=body, method="POST",
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )  # fmt: skip
        try:
            with DIRECT.open(request) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    with ThreadPoolExecutor(8) as pool:  # 8 at once, 4 to each process
        statuses = list(pool.map(ask, two_servers * 4))

    assert set(statuses) <= {200, 429}
    # One process alone would let USER_QPS of its own 4 through: together no more than the
    # limit (and what the last second's window still allows) may pass.
    assert statuses.count(200) <= USER_QPS + 1 and statuses.count(429) >= 8 - USER_QPS - 1


@pytest.mark.django_db(transaction=True)
def test_a_model_added_on_one_process_is_used_by_the_other_from_its_next_request(alice, two_servers):
    first, second = two_servers
    alice.is_staff = True
    alice.save(update_fields=["is_staff"])
    cookie = session_cookie(alice)
    offline = "No language model is configured"
    assert offline in _page(second, "/", cookie)[0]  # the other process has built its router

    with FakeOpenAIServer() as model:
        _, token = _page(first, "/settings/models/", cookie)
        form = {
            "name": "shared", "base_url": model.base_url, "model": "fake-model", "api_key": "sk-test",
            "connect_timeout_s": "2", "first_token_timeout_s": "5", "total_timeout_s": "10", "enabled": "on",
            "csrfmiddlewaretoken": token,
        }  # fmt: skip
        request = urllib.request.Request(
            f"{first}/settings/models/", data=urllib.parse.urlencode(form).encode(), method="POST",
            headers={"Cookie": f"{cookie}; csrftoken={token}", "Referer": f"{first}/settings/models/",
                     "Content-Type": "application/x-www-form-urlencoded"},
        )  # fmt: skip
        with DIRECT.open(request) as response:  # the redirect back to the list, followed
            assert "shared" in response.read().decode()

        # The registry's version counter lives in Redis: the other process rebuilds its router.
        assert offline not in _page(second, "/", cookie)[0]
