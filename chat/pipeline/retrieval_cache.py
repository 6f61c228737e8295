"""The process's retrieval result cache, as the chat's default retriever uses it.

Built once from the settings: RETRIEVAL_CACHE_ENTRIES in this process's LRU, and the Django
cache as the shared layer when it is one the deployment's processes share (Redis), not the
process-local default.
"""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings
from django.core.cache import cache as django_cache

from graphrag.search import graph_version
from knowledge.result_cache import RetrievalCache
from knowledge.retrieval import RetrievalParams, RetrievalResult, retrieve

_LOCAL_BACKENDS = ("LocMemCache", "DummyCache")
_lock = threading.Lock()
_cache: RetrievalCache | None = None


def retrieval_cache() -> RetrievalCache:
    """The process-wide cache, made on first use."""
    global _cache
    with _lock:
        if _cache is None:
            _cache = RetrievalCache(
                entries=settings.RETRIEVAL_CACHE_ENTRIES,
                ttl_s=settings.RETRIEVAL_CACHE_TTL_S,
                shared=django_cache if is_shared_cache(settings.CACHES["default"]["BACKEND"]) else None,
                graph_version=graph_version,
            )
        return _cache


def reset_retrieval_cache() -> None:
    """Forget the process-wide cache; the next use builds it again from the settings."""
    global _cache
    with _lock:
        _cache = None


def is_shared_cache(backend: str) -> bool:
    """Whether a Django cache backend is shared by processes (not the in-process defaults)."""
    return not backend.endswith(_LOCAL_BACKENDS)


def cached_retrieve(query: str, kb: Any, params: RetrievalParams = RetrievalParams(), **kwargs: Any) -> RetrievalResult:
    """`knowledge.retrieval.retrieve` through the process's cache."""
    return retrieval_cache().retrieve(retrieve, query, kb, params, **kwargs)
