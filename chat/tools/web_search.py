"""The web_search tool: search the web and read the result pages, when web search is on.

Its passages come back as WEB evidence, each cited with its page's URL and checked like a
document's quote. Off (the default), it says so and sends nothing anywhere.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from chat.pipeline.tools import CitedOutput

# "联网搜索 X", "上网查一下 X", "search the web for X", "web search: X".
_ASKS = re.compile(
    r"联网搜索|联网查(?:询|找|一下)?|上网(?:搜索?|查(?:询|找|一下)?)|(?:在)?网上(?:搜索?|查(?:询|找|一下)?)|搜索网页|"
    r"\bsearch\s+(?:on\s+)?the\s+(?:web|internet)(?:\s+for)?\b|\bweb\s+search(?:\s+for)?\b",
    re.IGNORECASE,
)
_FILLER = re.compile(r"^[\s:：,，]*(?:请|please|帮我|一下|关于|about)?[\s:：,，]*|[\s?？。.!！]+$", re.IGNORECASE)


def extract(message: str) -> dict[str, Any] | None:
    """`{"query"}` when the message asks to search the web for something."""
    if not _ASKS.search(message):
        return None
    query = _FILLER.sub("", _ASKS.sub(" ", message)).strip()
    query = " ".join(query.split())
    return {"query": query} if query else None


def make_handler(searcher: Callable[[], Any] | None = None) -> Callable[[dict], str | CitedOutput]:
    """A handler searching with `searcher()`'s WebSearcher (None: web search is off)."""

    def handle(parameters: dict[str, Any]) -> str | CitedOutput:
        web = (searcher or _configured_searcher)()
        if web is None:
            return "Web search is off on this server: an administrator can turn it on in the settings."
        query = str(parameters.get("query", "")).strip()
        findings = web.search(query)
        if not findings.passages:
            why = f" ({'; '.join(findings.warnings[:3])})" if findings.warnings else ""
            return f"Nothing on the web was found for {query!r}{why}."
        lines = [f"- {p.title or p.url} ({p.url})" for p in findings.passages]
        return CitedOutput(f"From the web, for {query!r}:\n" + "\n".join(lines), findings.passages)

    return handle


def _configured_searcher() -> Any:
    from dataclasses import replace

    from django.conf import settings

    from chat.pipeline.timeouts import node_timeout_s
    from chat.web import WebSearcher, web_search_config
    from knowledge.analysis import analyze

    config = web_search_config()
    if not config.is_enabled:
        return None
    # The tool channel gives a call its own timeout: the search ends before it, with what it found.
    tool_s = node_timeout_s("tools") or settings.CHAT_TOOL_TIMEOUT_S
    return WebSearcher(replace(config, total_timeout_s=min(config.total_timeout_s, max(0.5, tool_s - 0.5))), analyze)


PARAMETERS = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
