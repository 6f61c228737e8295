"""Every error under /api/ answers in the API's JSON shape, `{"error": {"message", "code"}}`.

The views answer their own errors so; this middleware covers the ones Django makes before or
around a view: a 404 for an unknown address, a 405 from require_POST (an empty body), a CSRF
403 page, the 400 page of a body over DATA_UPLOAD_MAX_MEMORY_SIZE, and the 500 page (the
debug one too). It keeps the status and headers (Allow, Retry-After) and replaces the body.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse

API_PREFIX = "/api/"

_CODES = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
    413: "body_too_large", 429: "rate_limited", 500: "internal", 503: "unavailable",
}  # fmt: skip


class ApiErrorShapeMiddleware:
    """Answer error responses and request-body errors under /api/ in the API's JSON error shape."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not request.path.startswith(API_PREFIX) or not _needs_shape(response):
            return response
        return json_error(response)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        # A view reads its body itself, so Django's too-large error surfaces here, where the
        # ASGI edge (agentic_rag.body_limit) would have answered 413 had it seen the length.
        if request.path.startswith(API_PREFIX) and isinstance(exception, RequestDataTooBig):
            return body_too_large()
        return None


def _needs_shape(response: HttpResponse) -> bool:
    if response.status_code < 400 or response.streaming:
        return False
    return not response.get("Content-Type", "").startswith("application/json")


def json_error(response: HttpResponse) -> JsonResponse:
    """Return the JSON error standing for an error response, with its status and headers."""
    status = response.status_code
    shaped = JsonResponse({"error": {"message": _message(response), "code": _CODES.get(status, "error")}}, status=status)
    for header, value in response.headers.items():
        if header.lower() not in ("content-type", "content-length"):
            shaped[header] = value
    return shaped


def _message(response: HttpResponse) -> str:
    status = response.status_code
    if status == 405:
        return "This address takes %(methods)s only." % {"methods": response.get("Allow", "POST")}
    if status == 404:
        return "There is nothing at this address."
    if status == 403:
        return "The request was refused (CSRF check or permissions)."
    if status >= 500:
        return "The server failed to answer; its log has the details."
    return "The request could not be read."


def body_too_large() -> JsonResponse:
    """Answer a body over DATA_UPLOAD_MAX_MEMORY_SIZE as the ASGI edge's 413 does."""
    megabytes = f"{settings.DATA_UPLOAD_MAX_MEMORY_SIZE / 2**20:.1f}".removesuffix(".0")
    message = f"The request is larger than the {megabytes} MB this address accepts; nothing was saved."
    return JsonResponse({"error": {"message": message, "code": "body_too_large"}}, status=413)
