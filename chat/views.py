"""Pages of the chat app: the chat screen, sessions, feedback and the trace viewer."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from agentic_rag.llm import get_llm
from agentic_rag.ratelimit import rate_limited
from knowledge.models import KnowledgeBase

from .adapters import collect
from .cards import stage_lanes
from .feedback import record_feedback
from .forms import AskForm, FeedbackForm, RenameForm, chat_request
from .models import Conversation, Message, Trace
from .pipeline import ChatRefused, export_graph, iter_chat
from .waterfall import waterfall_rows

PAGE = "chat/chat.html"
SIDEBAR_SIZE = 50


def _get_conversation_for_user(request: HttpRequest, session_id: str) -> Conversation:
    return get_object_or_404(Conversation.objects.for_user(request.user), session_id=session_id)


def _get_message_for_user(request: HttpRequest, pk: int) -> Message:
    own = Message.objects.filter(conversation__user=request.user, role="assistant")
    return get_object_or_404(own, pk=pk)


def _get_trace_for_user(request: HttpRequest, trace_id) -> Trace:
    # Staff read by everyone's rule (their own traces hold another KB's evidence); superusers read all.
    traces = Trace.objects.all() if request.user.is_superuser else Trace.objects.for_user(request.user)
    return get_object_or_404(traces.select_related("conversation"), trace_id=trace_id)


def _kb_slug_of(conversation: Conversation | None) -> str:
    return conversation.kb.slug if conversation and conversation.kb else "auto"


def _page_context(request: HttpRequest, conversation: Conversation | None = None) -> dict:
    history = conversation.messages.select_related("trace", "conversation__kb") if conversation else []
    return {
        "sessions": Conversation.objects.for_user(request.user)[:SIDEBAR_SIZE],
        "conversation": conversation,
        "session_id": conversation.session_id if conversation else "",
        "chat_messages": list(history),
        "kbs": KnowledgeBase.objects.readable_by(request.user),
        "selected_kb": request.GET.get("kb") or _kb_slug_of(conversation),
        "lanes": stage_lanes(export_graph()),
        "max_chars": settings.CHAT_MAX_MESSAGE_CHARS,
        # Without a model, answers are quoted from the sources: say so before the first one.
        "has_model": get_llm().has_model,
    }


@login_required
@require_GET
def chat_home(request: HttpRequest) -> HttpResponse:
    return render(request, PAGE, _page_context(request))


@login_required
@require_GET
def chat_session(request: HttpRequest, session_id: str) -> HttpResponse:
    conversation = _get_conversation_for_user(request, session_id)
    return render(request, PAGE, _page_context(request, conversation))


@login_required
@rate_limited
@require_POST
def chat_send(request: HttpRequest) -> HttpResponse:
    """Answer without JavaScript: run the pipeline to the end, then show the session."""
    form = AskForm(request.POST, user=request.user)
    session_id = None
    if not form.is_valid():
        messages.error(request, form.first_error())
    else:
        try:
            result = collect(iter_chat(chat_request(form)))
        except ChatRefused as refusal:
            messages.error(request, str(refusal))
        else:
            session_id = result.session_id
            if result.error_code:  # the stored exchange shows the partial answer; say why it stopped
                messages.error(request, result.error)
    # Back to the session asked about (its id passed the form's check), or a new chat.
    session_id = session_id or form.cleaned_data.get("session_id")
    return redirect("chat-session", session_id) if session_id else redirect("chat")


@login_required
@require_POST
def chat_rename(request: HttpRequest, session_id: str) -> HttpResponse:
    conversation = _get_conversation_for_user(request, session_id)
    form = RenameForm(request.POST)
    if form.is_valid():
        conversation.title = form.cleaned_data["title"]
        conversation.save(update_fields=["title", "updated_at"])
    if request.htmx:
        context = {"s": conversation, "current_id": request.POST.get("current")}
        return render(request, f"{PAGE}#session-renamed", context)
    return redirect("chat-session", session_id)


@login_required
@require_http_methods(["GET", "POST"])
def chat_delete(request: HttpRequest, session_id: str) -> HttpResponse:
    conversation = _get_conversation_for_user(request, session_id)
    if request.method == "GET":
        return render(request, "chat/session_confirm_delete.html", {"conversation": conversation})
    conversation.delete()
    messages.success(request, gettext("Deleted “%(title)s”.") % {"title": conversation.title or session_id})
    return HttpResponseClientRedirect("/") if request.htmx else redirect("chat")


@login_required
@require_POST
def message_feedback(request: HttpRequest, pk: int) -> HttpResponse:
    message = _get_message_for_user(request, pk)
    form = FeedbackForm(request.POST)
    if form.is_valid():
        record_feedback(request.user, message, is_positive=form.cleaned_data["value"] == "up")
    if request.htmx:
        return render(
            request, f"{PAGE}#feedback", {"message": message}, status=200 if form.is_valid() else 400
        )
    return redirect("chat-session", message.conversation.session_id)


@login_required
@require_GET
def trace_detail(request: HttpRequest, trace_id) -> HttpResponse:
    trace = _get_trace_for_user(request, trace_id)
    rows, axis_ms = waterfall_rows(trace.spans.all(), trace.total_ms or 0.0)
    ticks = [(pct, axis_ms * pct / 100) for pct in (0, 25, 50, 75, 100)]
    feedback = trace.feedback.select_related("user")
    context = {"trace": trace, "rows": rows, "axis_ms": axis_ms, "ticks": ticks, "feedback": feedback}
    return render(request, "chat/trace.html", context)
