"""A Redis cache that a Redis outage cannot turn into errors: reads miss, writes are dropped.

The cache holds request counters (metrics, rate limits), locks and memoised results; no page
needs it to answer. Django's RedisCache raises on every call while Redis is down, and the
metrics middleware calls it on every request, so every page was a 500. Here a failed call
answers as a miss would (get → default, add → False, incr → ValueError as for a missing key),
Redis is then left alone for RETRY_AFTER_S so a page does not wait on a dead server once per
call, and the outage is logged once every LOG_EVERY_S, not once per call.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient

log = logging.getLogger(__name__)

RETRY_AFTER_S = 5.0
LOG_EVERY_S = 60.0
_MISSING = object()


class Outage:
    """Whether Redis failed a moment ago, shared by the process's threads (each has its own client)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._down_until = -math.inf
        self._logged_at = -math.inf

    @property
    def is_down(self) -> bool:
        return self._clock() < self._down_until

    def failed(self, error: Exception) -> None:
        now = self._clock()
        with self._lock:
            self._down_until = now + RETRY_AFTER_S
            if now - self._logged_at < LOG_EVERY_S:
                return
            self._logged_at = now
        log.warning("Redis (the cache) is unreachable, answering without it: %s", error)


outage = Outage()


class FailSoftRedisCacheClient(RedisCacheClient):
    """Django's Redis client, with each call answered as a miss while Redis is unreachable."""

    def _soft(self, call: Callable[..., Any], miss: Any, *args: Any) -> Any:
        if outage.is_down:
            return miss
        try:
            return call(*args)
        except (self._lib.ConnectionError, self._lib.TimeoutError) as error:
            outage.failed(error)
            return miss

    def add(self, key, value, timeout):
        return self._soft(super().add, False, key, value, timeout)

    def get(self, key, default):
        return self._soft(super().get, default, key, default)

    def set(self, key, value, timeout):
        self._soft(super().set, None, key, value, timeout)

    def touch(self, key, timeout):
        return self._soft(super().touch, False, key, timeout)

    def delete(self, key):
        return self._soft(super().delete, False, key)

    def get_many(self, keys):
        return self._soft(super().get_many, {}, keys)

    def has_key(self, key):
        return self._soft(super().has_key, False, key)

    def incr(self, key, delta):
        value = self._soft(super().incr, _MISSING, key, delta)
        if value is _MISSING:  # callers already handle a missing key
            raise ValueError(f"Key '{key}' not found (the cache is unreachable).")
        return value

    def set_many(self, data, timeout):
        self._soft(super().set_many, None, data, timeout)

    def delete_many(self, keys):
        self._soft(super().delete_many, None, keys)

    def clear(self):
        return self._soft(super().clear, False)


class FailSoftRedisCache(RedisCache):
    """settings.CACHES' backend when REDIS_URL is set."""

    def __init__(self, server, params) -> None:
        super().__init__(server, params)
        self._class = FailSoftRedisCacheClient
