"""The document editor: the outline, the selected section and the assistant, side by side.

Forms post without JavaScript and redirect back to the editor; with htmx the assistant's
reply is appended to the conversation in place, and a verdict on a proposal replaces it.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect

from agentic_rag.input_hygiene import BadInput, check_values
from agentic_rag.llm import get_llm
from agentic_rag.ratelimit import check_rate, session_of
from chat.models import DocumentChatTurn, DocumentProposal
from chat.pipeline.state import language_of
from knowledge.editing import EditableSection, document_sections, is_editable, outline_window
from knowledge.models import Document

from .diff import word_diff
from .proposals import ProposalError, accept_proposal, proposal_for, reject_proposal
from .workflow import DocChatRequest, SelectedSection, readable_document, run_document_chat, stored_history

PAGE = "chat/document_editor.html"
REGENERATE = {"en": "Regenerate: write another version", "zh": "重新生成"}


def _readable_document(request: HttpRequest, pk: int) -> Document:
    document = readable_document(request.user, pk)
    if document is None:
        raise Http404("No such document.")
    return document


def _selected(sections: list[EditableSection], raw: str | None) -> EditableSection:
    try:
        position = int(raw) if raw not in (None, "") else 0
    except ValueError:
        raise Http404("No such section.") from None
    if not 0 <= position < len(sections):
        raise Http404("No such section.")
    return sections[position]


def _conversation_id(raw: str | None) -> str:
    cleaned = "".join(ch for ch in (raw or "") if ch.isalnum() or ch in "-_")[:64]
    return cleaned or uuid.uuid4().hex


def editor_url(document: Document, position: int, conversation_id: str) -> str:
    return f"{reverse('document-editor', args=[document.pk])}?section={position}&c={conversation_id}"


@login_required
@require_GET
def document_editor(request: HttpRequest, pk: int) -> HttpResponse:
    document = _readable_document(request, pk)
    sections = document_sections(document)
    if not sections:
        messages.error(request, gettext("This document's sections cannot be read; re-upload it."))
        return redirect(document.get_absolute_url())
    selected = _selected(sections, request.GET.get("section"))
    conversation_id = _conversation_id(request.GET.get("c"))
    turns = (
        DocumentChatTurn.objects.filter(user=request.user, document=document, conversation_id=conversation_id)
        .select_related("proposal", "trace")
        .order_by("created_at", "id")
    )
    context = {
        "document": document,
        "kb": document.kb,
        "sections": outline_window(sections, selected.position, settings.DOCUMENT_OUTLINE_ITEMS),
        "section_count": len(sections),
        "selected": selected,
        # A section as long as a whole document (one with no headings) is shown in part.
        "shown_chars": settings.DOCUMENT_PAGE_CHARS,
        "conversation_id": conversation_id,
        "turns": [_turn_view(turn) for turn in turns],
        "can_write": document.kb.is_writable_by(request.user),
        "editable": is_editable(document),
        "has_model": get_llm().has_model,
        "max_chars": settings.CHAT_MAX_MESSAGE_CHARS,
    }
    return render(request, PAGE, context)


@login_required
@require_POST
def document_assist(request: HttpRequest, pk: int) -> HttpResponse:
    document = _readable_document(request, pk)
    sections = document_sections(document)
    selected = _selected(sections, request.POST.get("section"))
    conversation_id = _conversation_id(request.POST.get("conversation_id"))
    decision = check_rate(request.user.pk, session_of(request))
    if not decision.allowed:
        return _reply_error(request, document, selected, conversation_id, decision.message)
    try:
        check_values({"message": request.POST.get("message", "")})  # a NUL PostgreSQL cannot store
    except BadInput as error:
        return _reply_error(request, document, selected, conversation_id, str(error))
    chat = DocChatRequest(
        user=request.user,
        message=request.POST.get("message", ""),
        section=SelectedSection.of(document, selected),
        document=document,
        conversation_id=conversation_id,
        history=stored_history(request.user, conversation_id),
    )
    data = run_document_chat(chat, lambda event, payload: None)
    if not request.htmx:
        if data.get("error"):
            messages.error(request, data["error"]["message"])
        return redirect(editor_url(document, selected.position, conversation_id))
    turn = DocumentChatTurn.objects.select_related("proposal", "trace").get(pk=data["turn_id"])
    return render(request, f"{PAGE}#turn", _turn_context(request, document, _turn_view(turn)))


def _reply_error(request, document, selected, conversation_id: str, message: str) -> HttpResponse:
    if not request.htmx:
        messages.error(request, message)
        return redirect(editor_url(document, selected.position, conversation_id))
    turn = {"message": request.POST.get("message", ""), "error": message}
    return render(request, f"{PAGE}#turn", _turn_context(request, document, turn))


@login_required
@require_POST
def proposal_decide(request: HttpRequest, pk: int, verdict: str) -> HttpResponse:
    proposal = proposal_for(request.user, pk)
    if proposal is None or verdict not in ("accept", "reject"):
        raise Http404("No such proposal.")
    document = proposal.document
    url = editor_url(document, proposal.section_position, proposal.turn.conversation_id)
    try:
        if verdict == "accept":
            proposal = accept_proposal(proposal, request.user)
            messages.success(request, gettext(
                "Accepted: version %(version)s of %(name)s is being indexed; the previous version can be restored from the document page."
            ) % {"version": proposal.accepted_version, "name": document.name})
        else:
            proposal = reject_proposal(proposal, request.user)
    except ProposalError as error:
        if error.status == 403:
            raise PermissionDenied(str(error)) from error
        messages.error(request, str(error))
        proposal.refresh_from_db()
    if verdict == "accept" or not request.htmx:
        return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
    turn = DocumentChatTurn.objects.select_related("proposal", "trace").get(pk=proposal.turn_id)
    return render(request, f"{PAGE}#turn", _turn_context(request, document, _turn_view(turn)))


def _turn_context(request: HttpRequest, document: Document, turn: dict) -> dict:
    return {
        "turn": turn,
        "document": document,
        "can_write": document.kb.is_writable_by(request.user),
        "editable": is_editable(document),
    }


def _turn_view(turn: DocumentChatTurn) -> dict:
    """What the page shows of a stored turn: the reply, or the proposal with its diff."""
    proposal: DocumentProposal | None = getattr(turn, "proposal", None)
    details = turn.details or {}
    view = {
        "message": turn.message,
        "reply": turn.reply,
        "response_type": turn.response_type,
        "intent": turn.intent,
        "references": details.get("references", []),
        "warnings": details.get("warnings", []),
        "offline": details.get("offline", False),
        "trace_id": turn.trace.trace_id if turn.trace_id else None,
        "error": turn.reply if turn.response_type == "error" else "",
        "proposal": proposal,
    }
    if proposal is not None:
        view["diff"] = word_diff(proposal.original_content, proposal.proposed_content)
        view["regenerate"] = REGENERATE[language_of(turn.message)]
    return view
