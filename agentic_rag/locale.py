"""The interface language of a websocket, chosen as Django's LocaleMiddleware chooses it
for a page: the language switch's cookie, else the browser's Accept-Language, else
English. Streamed partials then read like the page they land on."""

from __future__ import annotations

from django.conf import settings
from django.utils import translation


def language_from_scope(scope: dict) -> str:
    """The supported language a websocket's cookies and headers ask for."""
    cookie = scope.get("cookies", {}).get(settings.LANGUAGE_COOKIE_NAME, "")
    if cookie:
        try:
            return translation.get_supported_language_variant(cookie)
        except LookupError:
            pass  # a stale or forged cookie falls back to the browser's choice
    headers = dict(scope.get("headers", []))
    accept = headers.get(b"accept-language", b"").decode("latin-1")
    for code, _quality in translation.trans_real.parse_accept_lang_header(accept):
        if code == "*":
            break
        try:
            return translation.get_supported_language_variant(code)
        except LookupError:
            continue
    return settings.LANGUAGE_CODE


class LocaleMiddleware:
    """Channels middleware: run the consumer with its connection's language active.

    Sits inside AuthMiddlewareStack, whose cookie middleware has parsed the cookies."""

    def __init__(self, inner) -> None:
        self.inner = inner

    async def __call__(self, scope, receive, send):
        with translation.override(language_from_scope(scope)):
            return await self.inner(scope, receive, send)
