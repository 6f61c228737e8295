"""Where the web search is configured: the environment (settings.WEB_*), or the row saved on
the Language models page, which replaces it once saved. Off unless one of them names a provider."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from django.conf import settings

from .fetch import FetchPolicy

JSON_TYPES = ("application/json", "text/json")


@dataclass(frozen=True)
class WebSearchConfig:
    provider: str = ""  # "": off; "searxng" or "brave"
    base_url: str = ""
    api_key: str = ""
    allow_domains: tuple[str, ...] = ()  # results and redirects only from these (empty: any)
    deny_domains: tuple[str, ...] = ()
    allow_hosts: tuple[str, ...] = ()  # inside hosts or networks that may be fetched (SSRF exception)
    # The provider host the deployment named (WEB_SEARCH_URL's): reached even when inside, but
    # only to ask the provider; a result pointing there is refused like any inside page.
    provider_hosts: tuple[str, ...] = ()
    max_results: int = 5
    pages_per_query: int = 3
    connect_timeout_s: float = 3.0
    read_timeout_s: float = 5.0
    total_timeout_s: float = 6.0
    max_response_bytes: int = 4_000_000
    max_page_bytes: int = 2_000_000
    max_redirects: int = 3

    @property
    def is_enabled(self) -> bool:
        return bool(self.provider) and (bool(self.base_url) or self.provider == "brave")

    def provider_policy(self, headers: dict[str, str], total_s: float) -> FetchPolicy:
        """How the provider is asked: JSON only, its own host allowed, no domain lists."""
        return FetchPolicy(
            allow_hosts=self.allow_hosts + self.provider_hosts, content_types=JSON_TYPES + ("text/html",),
            max_bytes=self.max_response_bytes,
            max_redirects=self.max_redirects, connect_timeout_s=self.connect_timeout_s,
            read_timeout_s=self.read_timeout_s, total_timeout_s=total_s, headers=headers,
        )

    def page_policy(self, total_s: float) -> FetchPolicy:
        """How a result's page is fetched: text only, within the domain lists and the byte cap."""
        return FetchPolicy(
            allow_hosts=self.allow_hosts, allow_domains=self.allow_domains, deny_domains=self.deny_domains,
            max_bytes=self.max_page_bytes, max_redirects=self.max_redirects,
            connect_timeout_s=self.connect_timeout_s, read_timeout_s=self.read_timeout_s, total_timeout_s=total_s,
        )


def environment_config() -> WebSearchConfig:
    """The web search as settings.py read it from the environment."""
    return WebSearchConfig(
        provider=settings.WEB_SEARCH_PROVIDER,
        base_url=settings.WEB_SEARCH_URL,
        api_key=key_from_environment(settings.WEB_SEARCH_API_KEY_ENV),
        allow_domains=tuple(settings.WEB_SEARCH_ALLOW_DOMAINS),
        deny_domains=tuple(settings.WEB_SEARCH_DENY_DOMAINS),
        allow_hosts=tuple(settings.WEB_FETCH_ALLOW_HOSTS),
        provider_hosts=_host_of(settings.WEB_SEARCH_URL),
        max_results=settings.WEB_SEARCH_MAX_RESULTS,
        pages_per_query=settings.WEB_SEARCH_PAGES,
        connect_timeout_s=settings.WEB_SEARCH_CONNECT_TIMEOUT_S,
        read_timeout_s=settings.WEB_SEARCH_READ_TIMEOUT_S,
        total_timeout_s=settings.WEB_SEARCH_TOTAL_TIMEOUT_S,
        max_response_bytes=settings.WEB_SEARCH_MAX_RESPONSE_BYTES,
        max_page_bytes=settings.WEB_FETCH_MAX_BYTES,
        max_redirects=settings.WEB_FETCH_MAX_REDIRECTS,
    )


def web_search_config() -> WebSearchConfig:
    """The web search in force: the page's saved row over the environment's."""
    from django.db import DatabaseError

    from agentic_rag.models import WebSearchSettings

    base = environment_config()
    try:
        row = WebSearchSettings.objects.first()
    except DatabaseError:  # before migrate
        return base
    return base if row is None else config_from_row(row, base)


def config_from_row(row, base: WebSearchConfig) -> WebSearchConfig:
    """The row's choices over base; the inside hosts stay the environment's alone (a row's
    provider on another inside host must be on WEB_FETCH_ALLOW_HOSTS)."""
    return replace(
        base,
        provider=row.provider if row.enabled else "",
        base_url=row.base_url,
        api_key=key_from_environment(row.api_key_env),
        allow_domains=domain_list(row.allow_domains),
        deny_domains=domain_list(row.deny_domains),
        max_results=row.max_results,
        pages_per_query=row.pages_per_query,
        connect_timeout_s=row.connect_timeout_s,
        read_timeout_s=row.read_timeout_s,
        total_timeout_s=row.total_timeout_s,
    )


def key_from_environment(name: str) -> str:
    """The value of the named variable, only for a name the model keys may use (…_API_KEY)."""
    if not name or re.fullmatch(settings.LLM_KEY_ENV_PATTERN, name) is None:
        return ""
    return os.environ.get(name, "")


def domain_list(text: str) -> tuple[str, ...]:
    """Domains written one per line or separated by commas or spaces."""
    return tuple(dict.fromkeys(d.strip().lower().rstrip(".") for d in re.split(r"[\s,]+", text or "") if d.strip()))


def _host_of(url: str) -> tuple[str, ...]:
    host = (urlsplit(url).hostname or "").lower() if url else ""
    return (host,) if host else ()
