"""`manage.py bench global`: map-reduce global search against the former global search.

The data are the GraphRAG paper's (ms-graphrag-bench: `--data DIR`): a zip of transcripts and
a CSV of global questions ("What recurring topics do tech leaders emphasize?"). The
transcripts are ingested into a KB (kept: the next run reuses it) and its graph is built, then
every question is answered three ways in the same run:

- `former`: the global search this project had, the 4 top-level communities whose title and
  summary share the most words with the question (`rank_communities`), answered with their
  summaries, each line citing its community (the graph agent cited their first chunks);
- `former_same_reports`: the same, over as many communities as map-reduce maps, so the
  difference that remains is the map and the reduce, not the number of communities read;
- `map_reduce`: `global_answer` (graphrag.map_reduce), with the configured model or without.
Every answer is cut to the same token budget.

Rubric (deterministic, no model). The answer is cut into sentences (a bullet's or a line's
sentences share the markers it holds); a sentence is a key point when it
1. states something: at least 5 distinct content terms (knowledge.analysis.analyze);
2. is grounded: at least 60% of its terms occur in the chunks its markers cite;
3. is on the question: it shares a content term with it;
4. is new: its terms overlap (Jaccard) less than 0.5 with every key point before it.
Comprehensiveness is the number of key points, with the distinct communities, documents and
sources (a transcript cut into "-partN" files is one source) the answer cites. Community
coverage is the share of the KB's top-level communities cited, and the share of their
weight (`Community.rank`, their members' mentions). A citation is valid when its chunk belongs
to its community: one its summaries were read from, or one that mentions one of its members.
"""

from __future__ import annotations

import csv
import re
import statistics
import zipfile
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import Any

from django.contrib.auth import get_user_model
from django.test.utils import override_settings

from agentic_rag.llm import get_llm
from graphrag.build import build_graph
from graphrag.map_reduce import GlobalParams
from graphrag.models import Community, Mention
from graphrag.search import global_answer, rank_communities
from knowledge.analysis import analyze
from knowledge.chunking import count_tokens, split_sentences
from knowledge.ingest import run_ingestion, submit_document
from knowledge.models import Chunk, KnowledgeBase

CORPORA = {
    "podcast": ("Kevin_Scott_Podcast_Transcripts_Input_Text.zip", "Kevin_Scott_Questions.csv"),
    "msft": ("MSFT_Input_Text.zip", "MSFT_Multi_Transcript_Questions.csv"),
}
FORMER_TOP = 4  # what global_search returned before map-reduce
MIN_TERMS = 5
GROUNDED = 0.6
DISTINCT = 0.5
_PART = re.compile(r"-part\d+$", re.I)
_MARKER = re.compile(r"\[(\d{1,3})\]")


@dataclass(frozen=True)
class GlobalCorpus:
    name: str
    documents: list[tuple[str, bytes]]  # (file name, contents)
    questions: list[str]


def read_corpus(data_dir: Path, corpus: str, *, transcripts: int = 0, questions: int = 0) -> GlobalCorpus:
    """The corpus's documents (those of its first `transcripts` sources, 0: all) and questions."""
    archive_name, questions_name = CORPORA[corpus]
    with zipfile.ZipFile(data_dir / archive_name) as archive:
        names = sorted(n for n in archive.namelist() if n.lower().endswith(".txt") and not n.endswith("/"))
        if transcripts:
            keep = sorted({source_of(n) for n in names})[:transcripts]
            names = [n for n in names if source_of(n) in keep]
        documents = [(Path(n).name, archive.read(n)) for n in names]
    with (data_dir / questions_name).open(encoding="utf-8-sig", newline="") as handle:
        asked = [row["question_text"].strip() for row in csv.DictReader(handle) if row.get("question_text", "").strip()]
    return GlobalCorpus(corpus, documents, asked[:questions] if questions else asked)


def source_of(name: str) -> str:
    """The transcript a file was cut from: "EP-28_Mae-Jemison-part3.txt" → "EP-28_Mae-Jemison"."""
    return _PART.sub("", Path(name).stem)


def prepare_kb(slug: str, corpus: GlobalCorpus, *, log: Callable[[str], None] = print) -> KnowledgeBase:
    """The benchmark's KB holding the corpus (documents already there are kept), its graph built."""
    owner, _ = get_user_model().objects.get_or_create(username="bench")
    kb, _ = KnowledgeBase.objects.get_or_create(slug=slug, defaults={"name": f"Benchmark {slug}", "owner": owner})
    started = perf_counter()
    ingested = 0
    # Built once below, over all of them, rather than after every document.
    with override_settings(GRAPH_BUILD_AFTER_INGESTION=False):
        for name, data in corpus.documents:
            outcome = submit_document(kb, name, data, enqueue=lambda document_id: None, source=f"{corpus.name}/{name}")
            if outcome.status == "queued":
                run_ingestion(outcome.document.pk)
                ingested += 1
    log(f"ingested {ingested} of {len(corpus.documents)} documents in {perf_counter() - started:.1f} s")
    started = perf_counter()
    report = build_graph(kb)
    log(f"graph: {report.documents} documents read, {Community.objects.filter(kb=kb, level=0).count()} "
        f"top-level communities, {perf_counter() - started:.1f} s")
    return kb


@dataclass(frozen=True)
class Cited:
    community_id: int
    chunk_ids: tuple[int, ...]


@dataclass(frozen=True)
class AnswerUnderTest:
    text: str
    cited: dict[int, Cited]  # marker number → the community and chunks it names
    ms: float


def former_answer(kb: KnowledgeBase, question: str, *, top: int, budget_tokens: int) -> AnswerUnderTest:
    """The former global search's answer: its best communities' summaries, line by line."""
    started = perf_counter()
    lines: list[str] = []
    cited: dict[int, Cited] = {}
    used = 0
    for n, answer in enumerate(rank_communities(kb, question)[:top], 1):
        cited[n] = Cited(answer.community.pk, tuple(answer.community.chunk_ids))
        for line in filter(None, (line.strip() for line in answer.community.summary.splitlines())):
            cost = count_tokens(line) + 1
            if used + cost <= budget_tokens:
                lines.append(f"{line} [{n}]")
                used += cost
    return AnswerUnderTest("\n".join(lines), cited, (perf_counter() - started) * 1000)


def map_reduce_answer(kb: KnowledgeBase, question: str, *, llm: Any, params: GlobalParams) -> tuple[AnswerUnderTest, Any]:
    started = perf_counter()
    answer = global_answer(kb, question, llm=llm, params=params)
    cited = {c.number: Cited(c.community_id, (c.chunk_id,)) for c in answer.citations}
    return AnswerUnderTest(answer.text, cited, (perf_counter() - started) * 1000), answer


@dataclass(frozen=True)
class Scope:
    """What the judge knows of the KB: its communities, their weight, and the chunks of each
    (those its summaries were read from and those that mention one of its members)."""

    chunks_of: dict[int, set[int]]
    ranks: dict[int, float]

    @classmethod
    def of(cls, kb: KnowledgeBase) -> Scope:
        chunks_of: dict[int, set[int]] = defaultdict(set)
        ranks: dict[int, float] = {}
        for pk, parent, rank, chunk_ids in Community.objects.filter(kb=kb).values_list("id", "parent_id", "rank", "chunk_ids"):
            chunks_of[parent or pk].update(chunk_ids)
            if parent is None:
                ranks[pk] = rank
        members = Mention.objects.filter(entity__kb=kb, entity__community__isnull=False)
        for community_id, chunk_id in members.values_list("entity__community_id", "chunk_id").iterator():
            chunks_of[community_id].add(chunk_id)
        return cls(dict(chunks_of), ranks)


def judge(question: str, answer: AnswerUnderTest, scope: Scope) -> dict[str, float]:
    """The rubric's figures for one answer (module docstring)."""
    chunk_ids = {c for cited in answer.cited.values() for c in cited.chunk_ids}
    chunks = {pk: (name, text) for pk, name, text in
              Chunk.objects.filter(id__in=chunk_ids).values_list("id", "document__name", "text")}
    asked = set(analyze(question))
    key_points: list[frozenset[str]] = []
    for sentence, markers in _sentences_with_markers(answer.text):
        terms = frozenset(analyze(_MARKER.sub(" ", sentence)))
        sources = set(analyze(" ".join(chunks.get(c, ("", ""))[1] for m in markers if m in answer.cited
                                       for c in answer.cited[m].chunk_ids)))
        if (
            len(terms) >= MIN_TERMS
            and len(terms & sources) >= GROUNDED * len(terms)
            and terms & asked
            and all(len(terms & k) / len(terms | k) < DISTINCT for k in key_points)
        ):
            key_points.append(terms)
    used = {int(m) for m in _MARKER.findall(answer.text)} & set(answer.cited)
    communities = {answer.cited[m].community_id for m in used}
    documents = {chunks[c][0] for m in used for c in answer.cited[m].chunk_ids if c in chunks}
    valid = [all(c in scope.chunks_of.get(answer.cited[m].community_id, ()) for c in answer.cited[m].chunk_ids)
             for m in used]
    total_rank = sum(scope.ranks.values()) or 1.0
    return {
        "key_points": len(key_points),
        "communities_cited": len(communities),
        "documents_cited": len(documents),
        "sources_cited": len({source_of(name) for name in documents}),
        "community_coverage": len(communities) / (len(scope.ranks) or 1),
        "weight_coverage": sum(scope.ranks.get(c, 0.0) for c in communities) / total_rank,
        "citations_valid": sum(valid) / len(valid) if valid else 1.0,
        "tokens": count_tokens(answer.text),
        "ms": answer.ms,
    }


def _sentences_with_markers(text: str) -> list[tuple[str, list[int]]]:
    """Each sentence with its markers; one without any takes its line's."""
    found = []
    for line in filter(None, (line.strip() for line in text.splitlines())):
        line_markers = [int(m) for m in _MARKER.findall(line)]
        for sentence in split_sentences(line):
            markers = [int(m) for m in _MARKER.findall(sentence)] or line_markers
            if _MARKER.sub("", sentence).strip(" -*"):
                found.append((sentence, markers))
    return found


def bench_global(
    kb: KnowledgeBase, questions: Sequence[str], *, llm: Any = None, params: GlobalParams | None = None
) -> dict:
    """Answer every question the three ways (map-reduce with the configured model unless `llm`
    is given); the rubric's means side by side."""
    llm = llm if llm is not None else get_llm()
    params = params or GlobalParams.from_settings()
    scope = Scope.of(kb)
    rows: dict[str, list[dict[str, float]]] = {"former": [], "former_same_reports": [], "map_reduce": []}
    dropped = map_calls = 0
    methods: set[str] = set()
    for question in questions:
        rows["former"].append(judge(question, former_answer(
            kb, question, top=FORMER_TOP, budget_tokens=params.budget_tokens), scope))
        rows["former_same_reports"].append(judge(question, former_answer(
            kb, question, top=params.communities, budget_tokens=params.budget_tokens), scope))
        tested, answer = map_reduce_answer(kb, question, llm=llm, params=params)
        rows["map_reduce"].append(judge(question, tested, scope))
        dropped += len(answer.dropped)
        map_calls += len(answer.partials) + len(answer.dropped)
        methods.add(f"{answer.map_method}/{answer.reduce_method}")
    report: dict[str, Any] = {
        "questions": len(questions),
        "top_level_communities": len(scope.ranks),
        "map_reduce (map/reduce)": ", ".join(sorted(methods)),
        "map calls (dropped)": f"{map_calls} ({dropped})",
        "budget_tokens": params.budget_tokens,
    }
    for metric in rows["former"][0] if questions else ():
        report[metric] = {way: _mean([row[metric] for row in found]) for way, found in rows.items()}
    if questions:
        better = sum(n["key_points"] > f["key_points"] for n, f in zip(rows["map_reduce"], rows["former"], strict=True))
        worse = sum(n["key_points"] < f["key_points"] for n, f in zip(rows["map_reduce"], rows["former"], strict=True))
        report["key_points: map_reduce vs former (more/same/fewer)"] = f"{better}/{len(questions) - better - worse}/{worse}"
    return report


def _mean(values: list[float]) -> float:
    return round(statistics.fmean(values), 3) if values else 0.0

