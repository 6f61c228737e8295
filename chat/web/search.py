"""Search the web for a query: ask the provider, fetch the first allowed results' pages, and
return their passages that hold most of the query, as WEB evidence.

One `WebSearcher` serves one run (a DeepSearch question, a tool call): a page is fetched at
most once per run, every failure becomes a warning and never an exception, and the whole
search of one query ends within the configured total time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .config import WebSearchConfig
from .fetch import FetchPolicy, Fetched, WebError, fetch, is_domain_allowed
from .pages import WebPassage, page_passages
from .providers import SearchHit, parse_hits, provider_request

logger = logging.getLogger(__name__)

PASSAGES_PER_QUERY = 3
# Page fetches run in threads of their own: they touch no database and must not wait behind
# the retrieval pools that call them.
_PAGES = ThreadPoolExecutor(max_workers=4, thread_name_prefix="web-page")

Fetch = Callable[[str, FetchPolicy], Fetched]
Tokenize = Callable[[str], list[str]]


@dataclass(frozen=True)
class WebFindings:
    query: str
    passages: tuple[WebPassage, ...] = ()
    scores: tuple[float, ...] = ()  # each passage's share of the query's terms
    hits: int = 0  # results kept after the caps and the domain lists
    warnings: tuple[str, ...] = ()


@dataclass
class WebSearcher:
    """The web as one run searches it; counts what it did, for traces and figures."""

    config: WebSearchConfig
    tokenize: Tokenize
    fetcher: Fetch = fetch
    passages_per_query: int = PASSAGES_PER_QUERY
    searches: int = 0
    pages_fetched: int = 0
    # url: its passages, or why none; a future, so queries searched side by side share one fetch
    _pages: dict[str, Future] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def search(self, query: str) -> WebFindings:
        """Passages of the query's results, best first; never raises."""
        if not self.config.is_enabled:
            return WebFindings(query, warnings=("web search is off",))
        deadline = time.monotonic() + self.config.total_timeout_s
        self.searches += 1
        try:
            hits = self._hits(query, deadline)
        except WebError as error:
            logger.info("web search failed for %r: %s", query, error)
            return WebFindings(query, warnings=(f"web search failed: {error}",))
        pages = self._fetch_pages(hits[: self.config.pages_per_query], deadline)
        warnings = tuple(f"{url}: {why}" for url, why in pages.items() if isinstance(why, str))
        passages = [p for found in pages.values() if not isinstance(found, str) for p in found]
        ranked = rank_passages(query, passages, self.tokenize, limit=self.passages_per_query)
        return WebFindings(query, tuple(p for p, _ in ranked), tuple(s for _, s in ranked), len(hits), warnings)

    def _hits(self, query: str, deadline: float) -> list[SearchHit]:
        config = self.config
        request = provider_request(config.provider, config.base_url, query, api_key=config.api_key,
                                   count=config.max_results)
        answer = self.fetcher(request.url, config.provider_policy(request.headers, _left(deadline)))
        # Read more than kept: the domain lists may drop some of the first ones.
        hits = parse_hits(config.provider, answer, limit=4 * config.max_results)
        allowed = [h for h in hits if is_domain_allowed(_host(h.url), config.allow_domains, config.deny_domains)]
        return list({h.url: h for h in allowed}.values())[: config.max_results]

    def _fetch_pages(self, hits: list[SearchHit], deadline: float) -> dict[str, list[WebPassage] | str]:
        with self._lock:
            for hit in hits:
                if hit.url not in self._pages:
                    self._pages[hit.url] = _PAGES.submit(self._page, hit, deadline)
                    self.pages_fetched += 1
            futures = {h.url: self._pages[h.url] for h in hits}
        wait(futures.values(), timeout=max(0.0, deadline - time.monotonic()) + 0.5)
        return {url: future.result() if future.done() else "did not finish in time" for url, future in futures.items()}

    def _page(self, hit: SearchHit, deadline: float) -> list[WebPassage] | str:
        try:
            fetched = self.fetcher(hit.url, self.config.page_policy(_left(deadline)))
            return page_passages(fetched, title=hit.title) or "no readable text"
        except WebError as error:
            return str(error)
        except Exception as error:  # a page that breaks the reader is one lost result, not a failed search
            logger.warning("reading %s failed", hit.url, exc_info=True)
            return f"could not be read ({type(error).__name__})"


def rank_passages(
    query: str, passages: list[WebPassage], tokenize: Tokenize, *, limit: int
) -> list[tuple[WebPassage, float]]:
    """The passages holding the largest share of the query's terms (at least one), best first;
    ties keep the provider's order."""
    terms = set(tokenize(query))
    if not terms:
        return []
    scored = [(p, len(terms & set(tokenize(f"{p.section} {p.text}"))) / len(terms)) for p in passages]
    scored = [(p, s) for p, s in scored if s > 0]
    scored.sort(key=lambda pair: -pair[1])
    return scored[:limit]


def _host(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:  # "http://[": the fetcher refuses it too
        return ""


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise WebError("the web search ran out of time")
    return left
