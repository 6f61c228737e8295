"""The knowledge base websocket: who may listen, and what a progress event looks like."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from agentic_rag.asgi import application
from knowledge.models import Document, DocumentStatus
from knowledge.progress import kb_group_name

pytestmark = pytest.mark.django_db(transaction=True)


def session_headers(user=None) -> list[tuple[bytes, bytes]]:
    headers = [(b"origin", b"http://127.0.0.1")]
    if user is not None:
        client = Client()
        client.force_login(user)
        cookie = (
            f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
        )
        headers.append((b"cookie", cookie.encode()))
    return headers


def communicator(headers, slug: str = "alice-kb") -> WebsocketCommunicator:
    return WebsocketCommunicator(application, f"/ws/kb/{slug}/", headers=headers)


@pytest.fixture
def alice_headers(alice):
    return session_headers(alice)


@pytest.fixture
def bob_headers(bob):
    return session_headers(bob)


@pytest.fixture
def pending(kb):
    return Document.objects.create(kb=kb, name="guide.md", sha256="a" * 64, size=10)


async def test_it_refuses_anonymous_users(kb):
    connected, _ = await communicator(session_headers()).connect()
    assert not connected


async def test_it_refuses_users_who_cannot_read_the_kb(kb, bob_headers):
    connected, _ = await communicator(bob_headers).connect()
    assert not connected


async def test_it_refuses_a_kb_that_does_not_exist(alice_headers):
    connected, _ = await communicator(alice_headers, slug="nope").connect()
    assert not connected


async def test_it_sends_the_current_rows_on_connect(alice_headers, pending):
    socket = communicator(alice_headers)
    connected, _ = await socket.connect()
    assert connected
    rows = await socket.receive_from()
    counts = await socket.receive_from()
    assert rows.startswith('<tbody id="document-rows" hx-swap-oob="true">')
    assert f'id="document-{pending.pk}"' in rows
    assert 'id="kb-counts" hx-swap-oob="true"' in counts
    await socket.disconnect()


async def test_it_pushes_a_progress_event_as_a_row_fragment(alice_headers, pending):
    socket = communicator(alice_headers)
    await socket.connect()
    await socket.receive_from()
    await socket.receive_from()
    await _set_progress(pending, DocumentStatus.CHUNKING, 40)
    await get_channel_layer().group_send(
        kb_group_name(pending.kb_id), _event(pending, "chunking", 40)
    )
    row = await socket.receive_from()
    assert row.startswith(f'<tr id="document-{pending.pk}"')
    assert 'hx-swap-oob="true"' in row
    assert 'data-status="chunking"' in row
    assert 'aria-valuenow="40"' in row and "40%" in row
    assert await socket.receive_nothing()  # the counts only change when a document finishes
    await socket.disconnect()


async def test_it_refreshes_the_counts_when_a_document_is_ready(alice_headers, pending):
    socket = communicator(alice_headers)
    await socket.connect()
    await socket.receive_from()
    await socket.receive_from()
    await _set_progress(pending, DocumentStatus.READY, 100)
    await get_channel_layer().group_send(
        kb_group_name(pending.kb_id), _event(pending, "ready", 100)
    )
    row = await socket.receive_from()
    counts = await socket.receive_from()
    assert 'data-status="ready"' in row and 'role="progressbar"' not in row
    assert 'id="kb-counts" hx-swap-oob="true"' in counts
    assert "<dt>Ready</dt><dd>1</dd>" in counts
    await socket.disconnect()


async def test_it_resends_the_rows_when_the_page_asks(alice_headers, pending):
    socket = communicator(alice_headers)
    await socket.connect()
    await socket.receive_from()
    await socket.receive_from()
    await socket.send_to(text_data='{"HEADERS": {}}')
    assert f'id="document-{pending.pk}"' in await socket.receive_from()
    assert 'id="kb-counts"' in await socket.receive_from()
    await socket.disconnect()


@database_sync_to_async
def _set_progress(document: Document, status: str, percent: int) -> None:
    Document.objects.filter(pk=document.pk).update(status=status, progress=percent)


def _event(document: Document, status: str, percent: int) -> dict:
    return {
        "type": "ingest.progress",
        "document_id": document.pk,
        "kb_id": document.kb_id,
        "status": status,
        "stage": status,
        "percent": percent,
        "error": "",
        "chunk_count": 0,
    }


async def test_with_the_channel_layer_down_the_socket_is_refused_cleanly(alice_headers, kb, settings, caplog):
    from channels.layers import channel_layers

    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "agentic_rag.channel_layers.RedisChannelLayer", "CONFIG": {"hosts": ["redis://127.0.0.1:1/0"]}}
    }
    channel_layers.backends.clear()
    try:
        socket = communicator(alice_headers)
        connected, _ = await socket.connect(timeout=10)
        await socket.disconnect()
    finally:
        channel_layers.backends.clear()
    assert not connected  # the page shows its offline notice and retries; nothing crashed
    assert "channel layer is unreachable" in caplog.text
