"""Rate limits of the chat entry points, kept in Django's cache.

Three levels, checked global → user → session; any of them refuses:

- global: a token bucket of RATE_LIMIT_GLOBAL_QPS tokens refilled each second. The bucket
  is a per-second counter (`add` then `incr`, both atomic in Redis), which is a bucket that
  refills at once at the start of every second: cheap and consistent across processes.
- user and session: a sliding window of one second. Counters of the current and previous
  second are weighted by how much of the previous second is still inside the window.

A limit of 0 switches its level off. The cache is Redis in the full stack, so the limits
hold across processes; locmem keeps them per process.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.translation import gettext

Clock = Callable[[], float]


@dataclass(frozen=True)
class Decision:
    allowed: bool
    level: str = ""  # "global" | "user" | "session", the one that refused
    limit: int = 0
    retry_after_s: int = 0

    @property
    def message(self) -> str:
        return gettext("Too many requests (%(level)s limit %(limit)s/s); retry in %(seconds)s s.") % {
            "level": self.level, "limit": self.limit, "seconds": self.retry_after_s,
        }


ALLOWED = Decision(True)


def _hit(key: str, ttl: int) -> int:
    """Count one request under `key`; atomic where the cache is (Redis)."""
    cache.add(key, 0, ttl)
    try:
        return cache.incr(key)
    except ValueError:  # the key expired between add and incr
        cache.add(key, 1, ttl)
        return 1


def token_bucket(name: str, qps: int, now: float) -> bool:
    """Take a token from the bucket refilled to `qps` at every whole second."""
    return _hit(f"rl:bucket:{name}:{int(now)}", 2) <= qps


def sliding_window(name: str, qps: int, now: float) -> bool:
    """Count this request and tell whether the last second holds at most `qps` of them."""
    second = int(now)
    current = _hit(f"rl:window:{name}:{second}", 3)
    previous = cache.get(f"rl:window:{name}:{second - 1}", 0)
    weight = 1.0 - (now - second)
    return previous * weight + current <= qps


def check_rate(user_id: Any = None, session_key: str = "", *, clock: Clock = time.time) -> Decision:
    """Count a request against each level; the first level over its limit refuses it."""
    now = clock()
    retry_after = max(1, math.ceil(1 - (now - int(now))))
    levels = (
        ("global", settings.RATE_LIMIT_GLOBAL_QPS, "all", token_bucket),
        ("user", settings.RATE_LIMIT_USER_QPS, user_id, sliding_window),
        ("session", settings.RATE_LIMIT_SESSION_QPS, session_key, sliding_window),
    )
    for level, limit, who, check in levels:
        if limit > 0 and who not in (None, "") and not check(f"{level}:{who}", limit, now):
            return Decision(False, level, limit, retry_after)
    return ALLOWED


def session_of(request: HttpRequest) -> str:
    """The browser session, or the API token when the request carries one."""
    token = getattr(request, "api_token", None)
    if token is not None:
        return f"token:{token.pk}"
    session = getattr(request, "session", None)
    return session.session_key or "" if session is not None else ""


def too_many_requests(decision: Decision) -> JsonResponse:
    body = {"error": {"message": decision.message, "code": "rate_limited", "level": decision.level}}
    response = JsonResponse(body, status=429)
    response["Retry-After"] = str(decision.retry_after_s)
    return response


def rate_limited(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Answer 429 JSON with Retry-After when the request is over a limit (put it inside the auth)."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        user_id = request.user.pk if request.user.is_authenticated else None
        decision = check_rate(user_id, session_of(request))
        if not decision.allowed:
            return too_many_requests(decision)
        return view(request, *args, **kwargs)

    return wrapper
