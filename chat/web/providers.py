"""Web search providers: the request each one wants and the hits its JSON answer holds.

SearXNG (self-hosted, `GET {base}/search?q=…&format=json`, JSON output switched on in its
settings.yml) and Brave Search (`GET {base}/web/search?q=…`, key in `X-Subscription-Token`).
A provider's answer is data: only URLs and short strings are read from it, at most `limit`
of them, whatever it sends.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from .fetch import Fetched, WebError

BRAVE_BASE_URL = "https://api.search.brave.com/res/v1"
PROVIDERS = ("searxng", "brave")
TITLE_CHARS = 300
SNIPPET_CHARS = 1000


@dataclass(frozen=True)
class SearchHit:
    url: str
    title: str
    snippet: str


@dataclass(frozen=True)
class ProviderRequest:
    url: str
    headers: dict[str, str]


def provider_request(provider: str, base_url: str, query: str, *, api_key: str = "", count: int = 10) -> ProviderRequest:
    """The GET a provider answers query with."""
    base = base_url.rstrip("/")
    if provider == "searxng":
        return ProviderRequest(f"{base}/search?{urlencode({'q': query, 'format': 'json'})}", {})
    if provider == "brave":
        params = urlencode({"q": query, "count": max(1, min(count, 20))})
        return ProviderRequest(f"{base or BRAVE_BASE_URL}/web/search?{params}", {"X-Subscription-Token": api_key})
    raise WebError(f"no web search provider named {provider!r} (known: {', '.join(PROVIDERS)})")


def parse_hits(provider: str, answer: Fetched, *, limit: int) -> list[SearchHit]:
    """The first `limit` usable hits of a provider's answer; WebError when it is not its JSON."""
    data = _json(answer)
    listed = _listed(provider, data)
    hits: list[SearchHit] = []
    for entry in listed:
        hit = _hit(entry)
        if hit is not None:
            hits.append(hit)
        if len(hits) >= limit:
            break
    return hits


def _json(answer: Fetched) -> Any:
    text = answer.text().lstrip("\ufeff \t\r\n")
    if answer.content_type in ("text/html", "application/xhtml+xml") or text.startswith("<"):
        raise WebError(
            "the search provider answered HTML, not JSON (for SearXNG, add json to search.formats in its settings.yml)"
        )
    try:
        return json.loads(text)
    except ValueError as error:
        raise WebError(f"the search provider's answer is not JSON: {error}") from error


def _listed(provider: str, data: Any) -> list[Any]:
    if provider == "brave":
        web = data.get("web") if isinstance(data, dict) else None
        results = web.get("results") if isinstance(web, dict) else None
    else:
        results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        raise WebError("the search provider's JSON has no list of results")
    return results


def _hit(entry: Any) -> SearchHit | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("url"), str):
        return None
    url = entry["url"].strip()
    if not url.lower().startswith(("http://", "https://")):
        return None
    title = _text(entry.get("title"))[:TITLE_CHARS]
    snippet = _text(entry.get("content") or entry.get("description"))[:SNIPPET_CHARS]
    return SearchHit(url, title, snippet)


def _text(value: Any) -> str:
    return " ".join(value.split()) if isinstance(value, str) else ""


