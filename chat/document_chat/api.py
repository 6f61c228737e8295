"""`POST /api/document-chat` (JSON or SSE) and the proposal verdicts of the API.

The body: {message, document_id?, selected_section: {index, title, content, code,
chapter_level_1, chapter_level_2, position}, conversation_id?, conversation_history?,
response_mode: "json" | "sse", project_info?}. A document the caller may not read and
one that does not exist are the same 404; a section of another document is a 400.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

from django.core.handlers.asgi import ASGIRequest
from django.db import close_old_connections, connection
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.http import require_POST

from agentic_rag.auth import api_auth, api_error
from agentic_rag.input_hygiene import BadInput, check_types
from agentic_rag.ratelimit import rate_limited
from chat.adapters import HEARTBEAT_S, PING, sse_event
from chat.api import SSE_HEADERS, json_body
from chat.events import PipelineEvent
from knowledge.editing import document_sections
from knowledge.models import Document

from .proposals import ProposalError, accept_proposal, proposal_for, reject_proposal
from .workflow import (
    HISTORY_TURNS,
    DocChatError,
    DocChatRequest,
    SelectedSection,
    readable_document,
    run_document_chat,
    stored_history,
)

logger = logging.getLogger(__name__)

_END = object()
# Errors of the request itself answer 400 in JSON mode; the rest are the server's or the model's.
_CLIENT_ERRORS = {"empty_message", "too_long", "unknown_section", "bad_input"}
# The JSON type of each field of the body and of its selected_section.
FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "message": str, "document_id": (int, str), "selected_section": dict, "conversation_id": (str, int),
    "conversation_history": list, "response_mode": str, "stream": bool, "project_info": dict,
}
SECTION_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "index": (str, int, float), "title": str, "content": str, "code": str, "chapter_level_1": str,
    "chapter_level_2": str, "position": (int, str),
}


def _document(user, document_id: Any) -> Document:
    try:
        pk = int(document_id)
    except (TypeError, ValueError):
        raise DocChatError("document_id must be a number.") from None
    document = readable_document(user, pk)
    if document is None:
        raise DocChatError("No such document.", "unknown_document")
    return document


def resolve_section(document: Document, given: dict) -> SelectedSection:
    """The stored section the request names (by code, position or index), with the editor's text."""
    sections = document_sections(document)
    position = _position(document, given)
    if position is None and given.get("index"):
        position = next((s.position for s in sections if s.index == str(given["index"])), None)
    if position is None or not 0 <= position < len(sections):
        raise DocChatError("No such section in this document.", "unknown_section")
    content = given.get("content")
    return SelectedSection.of(document, sections[position], content if isinstance(content, str) and content.strip() else None)


def _position(document: Document, given: dict) -> int | None:
    code = str(given.get("code") or "")
    if code:
        owner, _, position = code.partition(":")
        if owner != str(document.pk):
            raise DocChatError("The section belongs to another document.", "unknown_section")
        return _int(position)
    return _int(given.get("position")) if given.get("position") not in (None, "") else None


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise DocChatError("The section's code or position is not valid.", "unknown_section") from None


def parse_request(data: dict, user) -> tuple[DocChatRequest, str]:
    """The workflow's request and the response mode, or DocChatError for a malformed body."""
    message = data.get("message", "")
    if not isinstance(message, str):
        raise DocChatError("message must be a string.")
    mode = data.get("response_mode") or ("sse" if data.get("stream") is True else "json")
    if mode not in ("json", "sse"):
        raise DocChatError('response_mode must be "json" or "sse".')
    given = data.get("selected_section") or {}
    if not isinstance(given, dict):
        raise DocChatError("selected_section must be an object.")
    try:
        check_types(given, SECTION_FIELD_TYPES, within="selected_section")
    except BadInput as error:
        raise DocChatError(str(error)) from None
    conversation_id = str(data.get("conversation_id") or uuid.uuid4().hex)[:64]
    document = _document(user, data["document_id"]) if data.get("document_id") not in (None, "") else None
    if document is not None:
        section = resolve_section(document, given)
    else:
        section = SelectedSection(**{k: str(given.get(k, ""))[:20000] for k in ("index", "title", "content", "code", "chapter_level_1", "chapter_level_2")})
    project_info = data.get("project_info") if isinstance(data.get("project_info"), dict) else {}
    return DocChatRequest(
        user=user, message=message, section=section, document=document, conversation_id=conversation_id,
        history=_history(data.get("conversation_history"), user, conversation_id), project_info=project_info,
    ), mode


def _history(given: Any, user, conversation_id: str) -> tuple[str, ...]:
    """The user's last six turns: from the request when it sends them, else as stored."""
    if isinstance(given, list):
        turns = [t.get("content", "") if isinstance(t, dict) and t.get("role", "user") == "user" else t for t in given]
        return tuple(str(t)[:2000] for t in turns if isinstance(t, str) and t.strip())[-HISTORY_TURNS:]
    return stored_history(user, conversation_id)


@api_auth
@rate_limited
@require_POST
def document_chat(request: HttpRequest) -> HttpResponse:
    body = json_body(request, FIELD_TYPES)
    if isinstance(body, JsonResponse):
        return body
    try:
        chat, mode = parse_request(body, request.user)
    except DocChatError as error:
        return api_error(404 if error.code == "unknown_document" else 400, str(error), error.code)
    if mode == "json":
        data = run_document_chat(chat, lambda event, payload: None)
        code = (data.get("error") or {}).get("code", "")
        status = 200 if not code else (400 if code in _CLIENT_ERRORS else 502)
        return JsonResponse(data, status=status)
    events = _start(chat)
    content = _adrain(events) if isinstance(request, ASGIRequest) else _drain(events)
    return StreamingHttpResponse(content, content_type="text/event-stream", headers=SSE_HEADERS)


def sse(event: str, data: dict) -> str:
    return sse_event(PipelineEvent(event, data=data))


def _start(chat: DocChatRequest) -> queue.Queue:
    """Run the workflow in a thread that puts each event, encoded, on the returned queue."""
    events: queue.Queue = queue.Queue()

    def work() -> None:
        close_old_connections()
        try:
            run_document_chat(chat, lambda event, data: events.put(sse(event, data)))
        except Exception:  # the runner reports node failures itself; this is the last net
            logger.exception("document chat failed")
            events.put(sse("error", {"error": "Document chat failed on the server; its log has the details.", "code": "internal"}))
            events.put(sse("completed", {"status": "failed"}))
        finally:
            events.put(_END)
            connection.close()

    threading.Thread(target=work, name="document-chat", daemon=True).start()
    return events


def _drain(events: queue.Queue) -> Iterator[str]:
    while True:
        try:
            item = events.get(timeout=HEARTBEAT_S)
        except queue.Empty:
            yield PING
            continue
        if item is _END:
            return
        yield item


async def _adrain(events: queue.Queue) -> AsyncIterator[str]:
    """The same lines for ASGI, which would buffer a sync iterator whole: each is awaited in a thread."""
    lines = _drain(events)
    while (line := await asyncio.to_thread(next, lines, None)) is not None:
        yield line


@api_auth
@require_POST
def proposal_verdict(request: HttpRequest, pk: int, verdict: str) -> HttpResponse:
    """`POST /api/document-chat/proposals/<id>/accept|reject`."""
    proposal = proposal_for(request.user, pk)
    if proposal is None or verdict not in ("accept", "reject"):
        return api_error(404, "No such proposal.", "unknown_proposal")
    try:
        if verdict == "accept":
            proposal = accept_proposal(proposal, request.user)
        else:
            proposal = reject_proposal(proposal, request.user)
    except ProposalError as error:
        return api_error(error.status, str(error), error.code)
    return JsonResponse({"id": proposal.pk, "status": proposal.status, "version": proposal.accepted_version})
