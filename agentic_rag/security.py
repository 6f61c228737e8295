"""The Content-Security-Policy header (settings.CONTENT_SECURITY_POLICY): only the app's own,
vendored scripts ever run.

Scripts come from our origin only: no inline script, no eval (htmx's `hx-on` and `js:`
values stay unused; `htmx-config` turns eval off). Inline style attributes are allowed:
the trace waterfall and progress bars set widths with them, and they cannot run code.
Websockets go back to our own host.
"""

from __future__ import annotations

from collections.abc import Callable
from inspect import iscoroutinefunction

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import sync_and_async_middleware


def _with_policy(response: HttpResponse) -> HttpResponse:
    if settings.CONTENT_SECURITY_POLICY and "Content-Security-Policy" not in response:
        response["Content-Security-Policy"] = settings.CONTENT_SECURITY_POLICY
    return response


@sync_and_async_middleware
def content_security_policy_middleware(get_response: Callable) -> Callable:
    """Add the policy to every response, in the sync or the async stack alike."""
    if iscoroutinefunction(get_response):

        async def add_async(request: HttpRequest) -> HttpResponse:
            return _with_policy(await get_response(request))

        return add_async

    def add(request: HttpRequest) -> HttpResponse:
        return _with_policy(get_response(request))

    return add
