"""Web search as a source of evidence: providers, a fetcher that cannot be turned on the inside
network, pages read into passages, and the search one run makes (see search.py)."""

from __future__ import annotations

from .config import WebSearchConfig, web_search_config
from .pages import WebPassage
from .search import WebFindings, WebSearcher

__all__ = ["WebFindings", "WebPassage", "WebSearchConfig", "WebSearcher", "web_search_config"]
