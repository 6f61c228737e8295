"""Authentication of /api/* requests: a browser session or a per-user bearer token.

A token-authenticated request is exempt from CSRF, since a browser never attaches the
Authorization header by itself; a session-authenticated POST keeps the CSRF check.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from functools import wraps

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from .models import DISPLAY_CHARS, ApiToken, hash_key


class _CsrfCheck(CsrfViewMiddleware):
    def _reject(self, request, reason):
        return reason  # a reason string instead of the HTML 403 page


def bearer_key(request: HttpRequest) -> str | None:
    """Return the key of an `Authorization: Bearer …` header, "" if malformed, None if absent."""
    header = request.headers.get("Authorization")
    if header is None:
        return None
    scheme, _, key = header.partition(" ")
    return key.strip() if scheme.lower() == "bearer" else ""


def authenticate_token(key: str) -> ApiToken | None:
    """Return the active token whose key this is, comparing hashes in constant time."""
    if not key:
        return None
    digest = hash_key(key)
    for token in ApiToken.objects.active().filter(prefix=key[:DISPLAY_CHARS]).select_related("user"):
        if hmac.compare_digest(token.key_hash, digest):
            return token
    return None


def api_error(status: int, message: str, code: str) -> JsonResponse:
    response = JsonResponse({"error": {"message": message, "code": code}}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="api"'
    return response


def api_auth(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Let a view in with a valid bearer token or a session (with CSRF); 401 JSON otherwise."""

    @csrf_exempt
    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        key = bearer_key(request)
        if key is not None:
            token = authenticate_token(key)
            if token is None:
                return api_error(401, "Invalid or revoked API token.", "unauthorized")
            token.mark_used()
            request.user = token.user
            request.api_token = token
        elif not request.user.is_authenticated:
            return api_error(401, "Sign in or send 'Authorization: Bearer <token>'.", "unauthorized")
        else:
            reason = _CsrfCheck(lambda r: None).process_view(request, None, (), {})
            if reason:
                return api_error(403, f"CSRF check failed: {reason}", "csrf")
        return view(request, *args, **kwargs)

    return wrapper
