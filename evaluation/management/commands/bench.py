"""manage.py bench ingest PATH --kb SLUG | bench retrieval --chunks N [--delta] | bench corpus --squad FILE --out DIR
| bench chat --kb SLUG [--queries N] [--repeat N] [--fake-llm] [--agent TYPE] | bench document-chat --kb SLUG [--runs N]
| bench load [--sessions N] [--servers N | --url URL ...] | bench dead-model --kb SLUG [--questions N]
| bench pages --kb SLUG [--runs N] [--load N [--rounds N] | --hostile-messages]
| bench global --data DIR [--corpus podcast|msft] [--transcripts N] [--questions N]"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from evaluation.benchmarks import bench_ingest, write_squad_corpus
from evaluation.chat_bench import bench_agent, bench_chat
from evaluation.dead_model_bench import bench_dead_model
from evaluation.document_chat_bench import bench_document_chat
from evaluation.global_bench import CORPORA, bench_global, prepare_kb, read_corpus
from evaluation.load_bench import run_sessions, session_cookies, start_servers, stop_servers, summarise
from evaluation.page_bench import bench_hostile_messages, bench_page_load, bench_pages
from evaluation.retrieval_bench import (
    SyntheticCorpus,
    bench_delta,
    bench_retrieval,
    embedder_name_and_dims,
    generate_corpus,
)
from knowledge.batch import collect_files
from knowledge.models import KnowledgeBase


class Command(BaseCommand):
    help = (
        "Measure speed: ingestion throughput, retrieval latency on a generated corpus, chat latency "
        "(including `ask`'s routed questions), or write a benchmark corpus from a SQuAD file."
    )

    def add_arguments(self, parser) -> None:
        sub = parser.add_subparsers(dest="target", required=True)
        ingest = sub.add_parser("ingest", help="ingest PATH into a fresh KB and report throughput")
        ingest.add_argument("path", metavar="PATH")
        ingest.add_argument("--kb", required=True, metavar="SLUG")
        ingest.add_argument("--reset", action="store_true", help="delete the KB's documents first")
        ingest.add_argument("--json", action="store_true")
        retrieval = sub.add_parser("retrieval", help="time retrieve() on a generated corpus of N child chunks")
        retrieval.add_argument("--chunks", type=int, default=10_000, metavar="N")
        retrieval.add_argument("--queries", type=int, default=200)
        retrieval.add_argument("--mode", default="hybrid", choices=["bm25", "vector", "hybrid", "multipath"])
        retrieval.add_argument("--kb", default="", metavar="SLUG", help="default: bench-synthetic-<N>-<embedder>")
        retrieval.add_argument(
            "--embedder", default="", metavar="NAME",
            help="vectors of this embedder's dimension (default: EMBEDDER; e5-small is what KBs upgrade to)",
        )
        retrieval.add_argument(
            "--delta", action="store_true",
            help="time applying a document's add, replace and delete to a warm embedded index, against a full build",
        )
        retrieval.add_argument("--json", action="store_true")
        chat = sub.add_parser("chat", help="time the chat pipeline on a KB (extractive; --fake-llm adds a streaming model)")
        chat.add_argument("--kb", required=True, metavar="SLUG")
        chat.add_argument("--queries", type=int, default=40, metavar="N", help="runs per measurement")
        chat.add_argument("--repeat", type=int, default=0, metavar="N",
                          help="also ask the KB questions N times each, with and without the retrieval cache")
        chat.add_argument("--fake-llm", action="store_true", help="also measure the pipeline's own time to first token")
        chat.add_argument("--agent", metavar="TYPE", help="time this worker type on compound questions instead")
        chat.add_argument("--json", action="store_true")
        document_chat = sub.add_parser(
            "document-chat", help="time document chat on a KB's sections, and the re-indexing an accepted edit costs"
        )
        document_chat.add_argument("--kb", required=True, metavar="SLUG")
        document_chat.add_argument("--runs", type=int, default=40, metavar="N", help="sections asked about and condensed")
        document_chat.add_argument("--json", action="store_true")
        dead = sub.add_parser(
            "dead-model", help="time the chat's fallback answers with a model that refuses, errs, hangs or stalls"
        )
        dead.add_argument("--kb", required=True, metavar="SLUG")
        dead.add_argument("--questions", type=int, default=20, metavar="N", help="questions per broken model")
        dead.add_argument("--json", action="store_true")
        pages = sub.add_parser(
            "pages", help="time every ready document's page and its memory; --load N: N pages and N chats at once on a server"
        )
        pages.add_argument("--kb", required=True, metavar="SLUG")
        pages.add_argument("--runs", type=int, default=20, metavar="N", help="requests per page view")
        pages.add_argument("--load", type=int, default=0, metavar="N", help="N page requests and N chat questions at once")
        pages.add_argument("--rounds", type=int, default=3, metavar="N", help="with --load: how many times")
        pages.add_argument(
            "--hostile-messages", action="store_true",
            help="time a page on a server while users send 4,000 repeats of one character, for 12 characters",
        )
        pages.add_argument("--at-once", type=int, default=1, metavar="N", help="with --hostile-messages: senders at once")
        pages.add_argument("--json", action="store_true")
        load = sub.add_parser("load", help="N chat sessions asking at once over websockets, on one or more servers")
        load.add_argument("--sessions", type=int, default=50, metavar="N")
        load.add_argument("--servers", type=int, default=1, metavar="N", help="daphne processes to start (default 1)")
        load.add_argument("--url", action="append", default=[], help="aim at this running server instead (repeatable)")
        load.add_argument("--kb", default="auto", metavar="SLUG", help="the KB asked (default: auto, routed)")
        load.add_argument("--timeout", type=float, default=60.0, metavar="S", help="a session's answer counts as lost after this")
        load.add_argument("--json", action="store_true")
        global_search = sub.add_parser(
            "global", help="map-reduce global search against the former one on ms-graphrag-bench's global questions"
        )
        global_search.add_argument("--data", required=True, type=Path, metavar="DIR", help="the ms-graphrag-bench folder")
        global_search.add_argument("--corpus", default="podcast", choices=sorted(CORPORA))
        global_search.add_argument("--transcripts", type=int, default=0, metavar="N", help="the first N transcripts (0: all)")
        global_search.add_argument("--questions", type=int, default=0, metavar="N", help="the first N questions (0: all)")
        global_search.add_argument("--kb", default="", metavar="SLUG", help="default: bench-global-<corpus>-<N>")
        global_search.add_argument("--json", action="store_true")
        corpus = sub.add_parser("corpus", help="write SQuAD paragraphs out as Markdown files")
        corpus.add_argument("--squad", required=True, type=Path, metavar="FILE")
        corpus.add_argument("--out", required=True, type=Path, metavar="DIR")
        corpus.add_argument("--per-file", type=int, default=20, metavar="N")

    def handle(self, *args, **options) -> None:
        if options["target"] == "corpus":
            count = write_squad_corpus(options["squad"], options["out"], paragraphs_per_file=options["per_file"])
            self.stdout.write(f"wrote {count} files to {options['out']}")
            return
        if options["target"] in ("chat", "document-chat", "dead-model"):
            kb = KnowledgeBase.objects.filter(slug=options["kb"]).select_related("owner").first()
            if kb is None:
                raise CommandError(f"no knowledge base '{options['kb']}'")
            # Hundreds of requests each log two INFO lines; -v 2 keeps them.
            quiet = nullcontext() if options["verbosity"] >= 2 else _logs_at_most(logging.WARNING)
            with quiet:
                if options["target"] == "document-chat":
                    report = bench_document_chat(kb, kb.owner, runs=options["runs"])
                elif options["target"] == "dead-model":
                    report = bench_dead_model(kb, kb.owner, questions=options["questions"])
                elif options["agent"]:
                    report = bench_agent(kb, kb.owner, options["agent"], queries=options["queries"])
                else:
                    report = bench_chat(kb, kb.owner, queries=options["queries"], fake_llm=options["fake_llm"],
                                        repeat=options["repeat"])
            self._print(report, as_json=options["json"])
            return
        if options["target"] == "pages":
            self._print(self._bench_pages(options), as_json=options["json"])
            return
        if options["target"] == "global":
            self._print(self._bench_global(options), as_json=options["json"])
            return
        if options["target"] == "load":
            self._print(self._bench_load(options), as_json=options["json"])
            return
        if options["target"] == "retrieval":
            self._print(self._bench_retrieval(options), as_json=options["json"])
            return
        kb = self._fresh_kb(options["kb"], reset=options["reset"])
        items = list(collect_files([options["path"]], recursive=True))
        if not items:
            raise CommandError(f"no files under {options['path']}")
        self._print(bench_ingest(kb, items).as_dict(), as_json=options["json"])

    def _bench_pages(self, options) -> dict:
        kb = KnowledgeBase.objects.filter(slug=options["kb"]).select_related("owner").first()
        if kb is None:
            raise CommandError(f"no knowledge base '{options['kb']}'")
        with _logs_at_most(logging.WARNING):
            try:
                if options["hostile_messages"]:
                    return bench_hostile_messages(kb, at_once=options["at_once"])
                if options["load"]:
                    return bench_page_load(kb, concurrency=options["load"], rounds=options["rounds"])
                return bench_pages(kb, kb.owner, runs=options["runs"])
            except RuntimeError as error:
                raise CommandError(str(error)) from error

    def _bench_global(self, options) -> dict:
        try:
            corpus = read_corpus(options["data"], options["corpus"], transcripts=options["transcripts"],
                                 questions=options["questions"])
        except (OSError, KeyError, zipfile.BadZipFile) as error:
            raise CommandError(f"cannot read the {options['corpus']} corpus in {options['data']}: {error}") from error
        slug = options["kb"] or f"bench-global-{corpus.name}-{options['transcripts'] or 'all'}"
        with _logs_at_most(logging.WARNING):
            kb = prepare_kb(slug, corpus, log=self.stderr.write)
            return bench_global(kb, corpus.questions)

    def _bench_retrieval(self, options) -> dict:
        name, dims = embedder_name_and_dims(options["embedder"] or None)
        slug = options["kb"] or f"bench-synthetic-{options['chunks']}-{name}"
        kb = KnowledgeBase.objects.filter(slug=slug).first()
        if kb is None:
            kb = self._fresh_kb(slug, reset=False)
            started = time.perf_counter()
            generate_corpus(kb, SyntheticCorpus(children=options["chunks"], dims=dims), name)
            self.stderr.write(f"generated {options['chunks']} child chunks in {time.perf_counter() - started:.1f} s")
        if options["delta"]:
            corpus = SyntheticCorpus(children=options["chunks"], dims=dims)
            return bench_delta(kb, corpus, name, queries=min(options["queries"], 50))
        return bench_retrieval(kb, queries=options["queries"], mode=options["mode"])

    def _bench_load(self, options) -> dict:
        sessions = options["sessions"]
        # Sessions share few users, as people share a deployment; each user stays within
        # RATE_LIMIT_USER_QPS when they all ask in the same second.
        cookies = session_cookies(max(1, math.ceil(sessions / max(1, settings.RATE_LIMIT_USER_QPS // 2))))
        servers = [] if options["url"] else start_servers(options["servers"])
        urls = options["url"] or [url for url, _ in servers]
        try:
            # One question per server first: a cold process loads its tokenizer and models on
            # the first question, which would land on every session of the burst.
            asyncio.run(run_sessions(urls, cookies, sessions=len(urls), kb=options["kb"], timeout=options["timeout"]))
            time.sleep(2)  # and the warm-up's questions leave the rate limits' one-second windows
            started = time.perf_counter()
            outcomes = asyncio.run(run_sessions(urls, cookies, sessions=sessions, kb=options["kb"], timeout=options["timeout"]))
            return summarise(outcomes, servers=len(urls), seconds=time.perf_counter() - started)
        finally:
            stop_servers(servers)

    def _print(self, report: dict, *, as_json: bool) -> None:
        if as_json:
            self.stdout.write(json.dumps(report))
            return
        for key, value in report.items():
            self.stdout.write(f"{key:45} {value}")

    def _fresh_kb(self, slug: str, *, reset: bool) -> KnowledgeBase:
        kb = KnowledgeBase.objects.filter(slug=slug).first()
        if kb is None:
            owner, _ = get_user_model().objects.get_or_create(username="bench")
            return KnowledgeBase.objects.create(slug=slug, name=f"Benchmark {slug}", owner=owner)
        if kb.documents.exists() and not reset:
            raise CommandError(f"knowledge base '{slug}' has documents: pass --reset to delete them first")
        kb.documents.all().delete()
        return kb


@contextmanager
def _logs_at_most(level: int) -> Iterator[None]:
    """Drop log records below `level` while the block runs."""
    logging.disable(level - 1)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)
