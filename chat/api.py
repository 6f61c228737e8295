"""The chat HTTP API: `POST /api/chat` (JSON) and `POST /api/chat/stream` (SSE).

Both take `{"message", "session_id"?, "kb"?, "agent_type"?}` as a JSON body (or form data) and run the
same pipeline as the chat page. Bad input is a 400 with a message; a KB that does not
exist and one the caller may not read are the same 404.
"""

from __future__ import annotations

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.http import require_POST

from agentic_rag.auth import api_auth, api_error
from agentic_rag.input_hygiene import BadInput, check_types, request_data
from agentic_rag.ratelimit import rate_limited

from .adapters import asse_stream, collect, sse_stream
from .feedback import record_feedback
from .forms import ASK_FIELD_TYPES, FEEDBACK_FIELD_TYPES, AskForm, FeedbackApiForm, chat_request
from .models import Message
from .pipeline import ChatRefused, aiter_chat, iter_chat

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
# Connection: keep-alive is left out: it is hop-by-hop, which WSGI forbids and HTTP/1.1
# implies.


def _ask_form(request: HttpRequest) -> AskForm | JsonResponse:
    """Parse the body into a valid AskForm, or return the error response to send."""
    data = json_body(request, ASK_FIELD_TYPES)
    if isinstance(data, JsonResponse):
        return data
    form = AskForm(data, user=request.user)
    if form.is_valid():
        return form
    if form.has_unknown_kb():
        return api_error(404, "No such knowledge base.", "unknown_kb")
    return api_error(400, form.first_error(), "bad_input")


def _refused(refusal: ChatRefused) -> JsonResponse:
    code = getattr(refusal, "code", "refused")
    return api_error(404 if code == "unknown_kb" else 400, str(refusal), code)


@api_auth
@rate_limited
@require_POST
def chat_json(request: HttpRequest) -> HttpResponse:
    form = _ask_form(request)
    if isinstance(form, JsonResponse):
        return form
    try:
        result = collect(iter_chat(chat_request(form)))
    except ChatRefused as refusal:
        return _refused(refusal)
    return JsonResponse(result.as_json(), status=502 if result.error_code else 200)


@api_auth
@rate_limited
@require_POST
def chat_stream(request: HttpRequest) -> HttpResponse:
    form = _ask_form(request)
    if isinstance(form, JsonResponse):
        return form
    chat = chat_request(form)
    # Under ASGI Django would buffer a sync iterator whole, so the socket gets the async one.
    if isinstance(request, ASGIRequest):
        content = asse_stream(aiter_chat(chat))  # refusals: the form checked what admit checks
    else:
        try:
            content = sse_stream(iter_chat(chat))
        except ChatRefused as refusal:
            return _refused(refusal)
    return StreamingHttpResponse(content, content_type="text/event-stream", headers=SSE_HEADERS)


def json_body(request: HttpRequest, types: dict[str, type | tuple[type, ...]]) -> dict | JsonResponse:
    """Return the request's fields, checked and of the given types, or the 400 to send."""
    try:
        data = request_data(request)
        if request.content_type == "application/json":  # form fields are all strings
            check_types(data, types)
    except BadInput as error:
        return api_error(400, str(error), error.code)
    return data


@api_auth
@require_POST
def feedback(request: HttpRequest) -> HttpResponse:
    """Record a verdict on one of the caller's answers: `{message_id, is_positive, comment?, …}`."""
    data = json_body(request, FEEDBACK_FIELD_TYPES)
    if isinstance(data, JsonResponse):
        return data
    form = FeedbackApiForm(data)
    if not form.is_valid():
        return api_error(400, form.first_error(), "bad_input")
    fields = form.cleaned_data
    own = Message.objects.filter(conversation__user=request.user, role="assistant").select_related("trace")
    message = own.filter(pk=fields["message_id"]).first()
    if message is None:  # someone else's answer and a missing one look the same
        return api_error(404, "No such message.", "unknown_message")
    saved = record_feedback(
        request.user, message, is_positive=fields["is_positive"], comment=fields["comment"],
        agent_type=fields["agent_type"], metadata=fields["metadata"],
    )
    return JsonResponse({"id": saved.pk, "message_id": message.pk, "is_positive": saved.is_positive}, status=201)
