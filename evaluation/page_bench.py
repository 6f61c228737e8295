"""How long a document page takes, how much memory one costs, and a server's memory under
concurrent page and chat requests.

`bench_pages` asks every ready document's page (its text and its chunks) in this process, as
the browser does, and reports latency per document and the peak Python memory a request
allocates against the document's size. `bench_page_load` starts a daphne process and sends
it N document-page requests and N chat questions at once, sampling the server's resident
memory throughout. `bench_hostile_messages` times another user's page while messages of one
repeated character are being answered.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
import tracemalloc
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from django.test import Client

from knowledge.models import Document, DocumentStatus, KnowledgeBase, Visibility

from .load_bench import QUESTIONS, ask_over_websocket, session_cookies, start_servers, stop_servers

VIEWS = ("text", "chunks")


def bench_pages(kb: KnowledgeBase, user, *, runs: int = 20) -> dict:
    """Time each ready document's page views in-process, then measure one request's memory."""
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)
    rows = []
    for document in Document.objects.filter(kb=kb, status=DocumentStatus.READY).order_by("name"):
        for view in VIEWS:
            rows.append(_bench_one(client, document, view, runs))
    every = sorted(ms for row in rows for ms in row.pop("_times"))
    return {
        "kb": kb.slug,
        "documents": len(rows) // len(VIEWS),
        "runs_per_page": runs,
        "p50_ms": _at(every, 0.50),
        "p95_ms": _at(every, 0.95),
        "worst_page_p95_ms": max((row["p95_ms"] for row in rows), default=None),
        # A page allocates about 90 kB whatever the document (session, templates, the outline);
        # the ratio to the document's size means something for documents past that.
        "worst_memory_ratio_64kb_plus": max(
            (row["memory_ratio"] for row in rows if row["size_bytes"] >= 64 * 1024), default=None
        ),
        "pages": rows,
    }


def _bench_one(client: Client, document: Document, view: str, runs: int) -> dict:
    url = f"{document.get_absolute_url()}?view={view}"
    _get_ok(client, url)  # warm: templates compiled, caches filled
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        _get_ok(client, url)
        times.append((time.perf_counter() - started) * 1000)
    tracemalloc.start()  # a run of its own: tracing slows the request it measures
    try:
        _get_ok(client, url)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    times.sort()
    return {
        "document": document.name,
        "view": view,
        "size_bytes": document.size,
        "p50_ms": _at(times, 0.50),
        "p95_ms": _at(times, 0.95),
        "peak_alloc_kb": round(peak / 1024, 1),
        "memory_ratio": round(peak / max(document.size, 1), 2),
        "_times": times,
    }


def _get_ok(client: Client, url: str) -> None:
    response = client.get(url)
    if response.status_code != 200:
        raise RuntimeError(f"{url} answered {response.status_code}")


def bench_page_load(kb: KnowledgeBase, *, concurrency: int = 20, rounds: int = 5) -> dict:
    """Start a server; send it `concurrency` page requests and as many chat questions at once,
    `rounds` times; report latencies and the server's resident memory."""
    documents = list(Document.objects.filter(kb=kb, status=DocumentStatus.READY).order_by("name"))
    if not documents:
        raise RuntimeError(f"{kb.slug} has no ready document")
    [(url, process)] = start_servers(1)
    try:
        cookies = _readers(kb, concurrency)
        # One request of each first: loading the tokenizer's dictionary and the KB's indexes is
        # a cost of the first question, not of concurrency.
        _one_round(url, cookies[:1], [documents[0].get_absolute_url()], kb.slug)
        memory = _MemorySampler(process.pid)
        baseline_kb = memory.current_kb()
        memory.start()
        pages, chats = [], []
        for round_number in range(rounds):
            paths = [documents[(round_number * concurrency + n) % len(documents)].get_absolute_url()
                     for n in range(concurrency)]  # fmt: skip
            page_times, chat_outcomes = _one_round(url, cookies, paths, kb.slug)
            pages += page_times
            chats += chat_outcomes
        memory.stop()
        return {
            "kb": kb.slug,
            "concurrency": concurrency,
            "rounds": rounds,
            "page_errors": sum(1 for t in pages if t is None),
            "page_p50_ms": _at(sorted(t for t in pages if t is not None), 0.50),
            "page_p95_ms": _at(sorted(t for t in pages if t is not None), 0.95),
            "chat_errors": sum(1 for o in chats if o.error or o.lost),
            "chat_error_examples": sorted({o.error or "lost" for o in chats if o.error or o.lost})[:3],
            "chat_final_p50_ms": _at(sorted(o.final_ms for o in chats if o.final_ms is not None), 0.50),
            "rss_baseline_mb": round(baseline_kb / 1024, 1),
            "rss_peak_mb": round(memory.peak_kb / 1024, 1),
            "rss_growth_mb": round((memory.peak_kb - baseline_kb) / 1024, 1),
        }
    finally:
        stop_servers([(url, process)])


HOSTILE_CHARACTERS = ("9", "a", " ", "|", "`", "*", "中", ".", "-", "#", "(", "，")


def bench_hostile_messages(kb: KnowledgeBase, *, length: int = 4000, at_once: int = 1) -> dict:
    """Start a server; for each of HOSTILE_CHARACTERS, `at_once` users send a message of that
    character repeated `length` times while another user opens a document page every 50 ms.
    Report how long that page took meanwhile, and how long the messages took to answer."""
    documents = list(Document.objects.filter(kb=kb, status=DocumentStatus.READY).order_by("name")[:1])
    if not documents:
        raise RuntimeError(f"{kb.slug} has no ready document")
    [(url, process)] = start_servers(1)
    try:
        cookies = _readers(kb, at_once + 1)
        page_url = url + documents[0].get_absolute_url()
        _timed_page(page_url, cookies[-1])  # warm
        pages, answers, errors, slowest = [], [], [], {}
        # Ordinary questions first: what the same page costs while any 4 questions are answered.
        baseline: list[float] = []
        _page_during(page_url, cookies[-1], baseline, lambda: asyncio.run(_ask_all(url, cookies[:at_once], kb.slug)))
        for character in HOSTILE_CHARACTERS:
            senders = _readers(kb, at_once)  # new sessions: one session's rate limit is 5 messages a second
            ask = _ask_all(url, senders, kb.slug, message=character * length)
            outcomes = _page_during(page_url, cookies[-1], pages, lambda ask=ask: asyncio.run(ask))
            answers += [o.final_ms for o in outcomes if o.final_ms is not None]
            slowest[character] = max((round(o.final_ms) for o in outcomes if o.final_ms is not None), default=None)
            errors += [f"{character!r}: {o.error or 'lost'}" for o in outcomes if o.error or o.lost]
        pages.sort()
        answers.sort()
        return {
            "kb": kb.slug, "message_chars": length, "at_once": at_once, "characters": len(HOSTILE_CHARACTERS),
            "page_requests": len(pages), "page_p50_ms": _at(pages, 0.50), "page_p95_ms": _at(pages, 0.95),
            "page_max_ms": pages[-1] if pages else None,
            "page_p95_ms_ordinary_questions": _at(sorted(baseline), 0.95),
            "answer_p50_ms": _at(answers, 0.50), "answer_max_ms_by_character": slowest,
            "errors": errors[:5],
        }
    finally:
        stop_servers([(url, process)])


def _page_during(url: str, cookie: str, times: list[float], work):
    """Run `work`, opening the page every 50 ms meanwhile; return what `work` returned."""
    done = threading.Event()
    watcher = threading.Thread(target=_watch_page, args=(url, cookie, done, times))
    watcher.start()
    try:
        return work()
    finally:
        done.set()
        watcher.join()


def _watch_page(url: str, cookie: str, done: threading.Event, times: list[float]) -> None:
    while not done.wait(0.05):
        elapsed = _timed_page(url, cookie)
        if elapsed is not None:
            times.append(elapsed)


def _readers(kb: KnowledgeBase, count: int) -> list[str]:
    """Session cookies of `count` users who may read the KB, each its own browser: one user
    asking 20 questions at once would meet the per-user rate limit, not the server's limits."""
    if kb.visibility != Visibility.PUBLIC:
        raise RuntimeError(f"{kb.slug} is not public: the load benchmark's users could not read it")
    return session_cookies(count, prefix="bench-pages")


def _one_round(url: str, cookies: list[str], paths: list[str], kb_slug: str):
    with ThreadPoolExecutor(len(paths)) as pool:
        pages = pool.map(lambda pair: _timed_page(url + pair[1], pair[0]), zip(cookies, paths, strict=True))
        chats = asyncio.run(_ask_all(url, cookies, kb_slug))
        return list(pages), chats


async def _ask_all(url: str, cookies: list[str], kb_slug: str, message: str = ""):
    return await asyncio.gather(*(
        ask_over_websocket(url, cookie, message or QUESTIONS[n % len(QUESTIONS)], kb_slug, 60)
        for n, cookie in enumerate(cookies)
    ))


def _timed_page(url: str, cookie: str) -> float | None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, headers={"Cookie": cookie})
    started = time.perf_counter()
    try:
        with opener.open(request, timeout=60) as response:
            response.read()
            if response.status != 200:
                return None
    except OSError:
        return None
    return (time.perf_counter() - started) * 1000


class _MemorySampler:
    """The peak resident memory of a process, sampled every 20 ms from /proc."""

    def __init__(self, pid: int) -> None:
        self.status = Path(f"/proc/{pid}/status")
        self.peak_kb = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def current_kb(self) -> int:
        for line in self.status.read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._done.wait(0.02):
            try:
                self.peak_kb = max(self.peak_kb, self.current_kb())
            except OSError:
                return


def _at(values: list[float], share: float) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, math.ceil(share * len(values)) - 1)], 1)

