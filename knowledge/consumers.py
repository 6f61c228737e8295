"""Websocket of a knowledge base page: pushes its document rows as ingestion moves on.

Every message is HTML that htmx-ext-ws swaps out of band: the same partials the page
renders, so a row looks the same whether it came with the page or over the socket.
"""

from __future__ import annotations

import logging

from channels.generic.websocket import AsyncWebsocketConsumer
from django.template import engines
from django.template.loader import render_to_string
from django.utils.html import format_html
from redis.exceptions import RedisError

from agentic_rag.db_threads import database_sync_to_async
from agentic_rag.input_hygiene import BadInput, loads_frame

from .models import DocumentStatus, KnowledgeBase
from .progress import background_indexing, kb_group_name
from .views import DETAIL

logger = logging.getLogger(__name__)
FINISHED = {DocumentStatus.READY, DocumentStatus.FAILED}


class KnowledgeBaseConsumer(AsyncWebsocketConsumer):
    group = ""

    async def connect(self) -> None:
        slug = self.scope["url_route"]["kwargs"]["slug"]
        access = await _get_access(self.scope.get("user"), slug)
        if access is None:
            await self.close()
            return
        self.kb, self.can_write = access
        try:
            await self.channel_layer.group_add(kb_group_name(self.kb.pk), self.channel_name)
        except (OSError, RedisError):  # the channel layer (Redis) is down: no live progress to give
            logger.warning("the channel layer is unreachable; refusing the progress socket of %s", slug)
            await self.close()
            return
        self.group = kb_group_name(self.kb.pk)
        await self.accept()
        # Catch up on whatever changed between rendering the page and connecting.
        await self._send_table()

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        # The page asks after swapping in an upload's table, since progress events that
        # arrived before that swap found no row to land on.
        try:
            loads_frame(text_data)
        except BadInput as error:
            await self.send(text_data=_refusal(str(error)))
            return
        await self._send_table()

    async def ingest_progress(self, event: dict) -> None:
        row = await _render_row(self.kb, event["document_id"], self.can_write)
        if row:
            await self.send(text_data=row)
        if event["status"] in FINISHED:
            await self.send(text_data=await _render_counts(self.kb))

    async def kb_background(self, event: dict) -> None:
        await self.send(text_data=await _render_background(self.kb))

    async def graph_progress(self, event: dict) -> None:
        # The graph app's builds publish to this KB's group; its template tag draws the line.
        await self.send(text_data=await _render_graph_status(self.kb, event))

    async def _send_table(self) -> None:
        # One fragment per message: table parts parse alone, not beside other elements.
        await self.send(text_data=await _render_rows(self.kb, self.can_write))
        await self.send(text_data=await _render_counts(self.kb))


def _refusal(reason: str) -> str:
    """A note under the upload form saying why a message was not read."""
    return format_html(
        '<div hx-swap-oob="beforeend:#upload-result"><p class="alert warning" role="status">{}</p></div>', reason
    )


@database_sync_to_async
def _get_access(user, slug: str) -> tuple[KnowledgeBase, bool] | None:
    if user is None:
        return None
    kb = KnowledgeBase.objects.readable_by(user).filter(slug=slug).first()
    return (kb, kb.is_writable_by(user)) if kb else None


@database_sync_to_async
def _render_row(kb: KnowledgeBase, document_id: int, can_write: bool) -> str:
    document = kb.documents.filter(pk=document_id).first()
    if document is None:  # deleted since the event was sent
        return ""
    context = {"kb": kb, "document": document, "can_write": can_write, "oob_row": True}
    return render_to_string(f"{DETAIL}#document-row", context).strip()


@database_sync_to_async
def _render_rows(kb: KnowledgeBase, can_write: bool) -> str:
    context = {"kb": kb, "documents": kb.documents.all(), "can_write": can_write, "oob_rows": True}
    return render_to_string(f"{DETAIL}#document-rows", context).strip()


@database_sync_to_async
def _render_counts(kb: KnowledgeBase) -> str:
    context = {"kb": kb, "counts": kb.document_counts(), "oob_counts": True}
    return render_to_string(f"{DETAIL}#kb-counts", context).strip()


@database_sync_to_async
def _render_graph_status(kb: KnowledgeBase, event: dict) -> str:
    template = engines["django"].from_string("{% load graphrag %}{% graph_status kb oob=True event=event %}")
    return template.render({"kb": kb, "event": event}).strip()


@database_sync_to_async
def _render_background(kb: KnowledgeBase) -> str:
    context = {"kb": kb, "background": background_indexing(kb.pk), "oob_background": True}
    return render_to_string(f"{DETAIL}#kb-background", context).strip()
