"""The retrieval playground: one query through every stage of `retrieve`, shown stage by stage."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django.utils.translation import gettext, gettext_lazy
from django.views.decorators.http import require_GET

from .candidates import Candidate
from .forms import PlaygroundForm
from .models import KnowledgeBase
from .rerank import FACTORS, RerankWeights
from .retrieval import InvalidQuery, RetrievalParams, RetrievalResult, retrieve
from .views import _get_kb_for_user

TEMPLATE = "knowledge/playground.html"

LEG_LABELS = {
    "bm25": gettext_lazy("BM25 · keyword"),
    "vector": gettext_lazy("Vector · cosine"),
    "parent_hybrid": gettext_lazy("Parent hybrid"),
    "child_locator": gettext_lazy("Child locator → parent"),
    "tag_match": gettext_lazy("Tag match"),
    "same_chapter": gettext_lazy("Same chapter"),
}
STAGE_LABELS = {
    "size": gettext_lazy("index"),
    "analyze": gettext_lazy("analyse"),
    "embed_query": gettext_lazy("embed query"),
    "bm25": "BM25",
    "vector": gettext_lazy("vector"),
    "recall": gettext_lazy("multi-path recall"),
    "fusion": gettext_lazy("fusion"),
    "cosines": gettext_lazy("cosines"),
    "rerank": gettext_lazy("rerank"),
    "post": gettext_lazy("post-processing"),
    "gate": gettext_lazy("gate"),
}
FACTOR_LABELS = {
    "cosine": gettext_lazy("Cosine"),
    "key_terms": gettext_lazy("Key terms"),
    "title": gettext_lazy("Title"),
    "score": gettext_lazy("Score"),
    "jaccard": "Jaccard",
}


@dataclass(frozen=True)
class StageTiming:
    key: str
    label: str
    ms: float
    share: float  # percent of the summed stages, for the bar
    detail: str = ""


@dataclass(frozen=True)
class Row:
    """One candidate in one stage's list, with what that stage scored it."""

    rank: int
    candidate: Candidate
    score: float | None = None
    share: float = 0.0  # percent of the list's best score, for the meter
    scores: tuple[float | None, ...] = ()  # per-leg or per-factor columns
    moved: int = 0  # places gained by rerank

    @property
    def distance(self) -> int:
        return abs(self.moved)


@dataclass(frozen=True)
class LegTable:
    name: str
    label: str
    ms: float | None
    rows: list[Row]
    weight: float | None = None  # a multipath path's weight in the fusion

    @property
    def weight_label(self) -> str:
        return f"{self.weight:g}" if self.weight is not None else ""


@login_required
@require_GET
def knowledge_playground(request: HttpRequest, slug: str) -> HttpResponse:
    """Run a query through every retrieval stage and show what each stage did."""
    kb = _get_kb_for_user(request, slug)
    form = PlaygroundForm(request.GET if "q" in request.GET else None, kb=kb)
    context = {"kb": kb, "form": form, **_run_query(form, kb)}
    # A history restore asks for the whole page under the same URL as the partial.
    if request.htmx and not request.htmx.history_restore_request:
        response = render(request, f"{TEMPLATE}#playground-results", context)
    else:
        response = render(request, TEMPLATE, context)
    patch_vary_headers(response, ["HX-Request"])
    return response


def _run_query(form: PlaygroundForm, kb: KnowledgeBase) -> dict:
    if not form.is_bound:
        return {}
    if not form.is_valid():
        errors = [f"{form[name].label}: {' '.join(messages)}" for name, messages in form.errors.items()]
        return {"form_errors": errors}
    params = form.params()
    try:
        result = retrieve(form.cleaned_data["q"], kb, params)
    except InvalidQuery as exc:
        return {"query_error": str(exc)}
    return _report(result, params)


def _report(result: RetrievalResult, params: RetrievalParams) -> dict:
    """Build the template's view of every stage of one retrieval."""
    timings = _stage_timings(result.timings_ms)
    return {
        "result": result,
        "timings": timings,
        "total_ms": result.timings_ms.get("total", sum(t.ms for t in timings)),
        "legs": [_leg_table(name, hits, result.timings_ms, params) for name, hits in result.legs.items()],
        "leg_labels": [LEG_LABELS.get(name, name.replace("_", " ")) for name in result.legs],
        "fused_rows": _fused_rows(result),
        "fusion_label": _fusion_label(params),
        "rerank_rows": _rerank_rows(result),
        "rerank_note": _rerank_note(result, params),
        "factor_labels": _factor_labels(),
        "final_rows": _rows(result.candidates, [c.score for c in result.candidates]),
        "verdict_rows": _verdict_rows(result),
        "gate_params": params.gate,
        "passed_count": len(result.gate.references) if result.gate else 0,
    }


def _stage_timings(timings_ms: dict[str, float]) -> list[StageTiming]:
    """Group the post-processors under one stage, keeping execution order."""
    stages: dict[str, float] = {}
    details: dict[str, list[str]] = {}
    for name, ms in timings_ms.items():
        if name == "total":
            continue
        stage, _, step = name.partition(".")
        stages[stage] = stages.get(stage, 0.0) + ms
        if step:
            details.setdefault(stage, []).append(f"{step.replace('_', ' ')} {ms:.2f} ms")
    span = sum(stages.values()) or 1.0
    return [
        StageTiming(
            key, STAGE_LABELS.get(key, key), ms, round(100 * ms / span, 1), " · ".join(details.get(key, []))
        )
        for key, ms in stages.items()
    ]


def _rows(
    candidates: Sequence[Candidate],
    scores: Sequence[float | None],
    columns: Sequence[tuple[float | None, ...]] = (),
    moved: Sequence[int] = (),
) -> list[Row]:
    """Number the candidates and size each score's meter against the list's best."""
    best = max((s for s in scores if s is not None and s > 0), default=0.0)
    return [
        Row(
            rank=position + 1,
            candidate=candidate,
            score=score,
            share=round(100 * max(score or 0.0, 0.0) / best, 1) if best else 0.0,
            scores=columns[position] if columns else (),
            moved=moved[position] if moved else 0,
        )
        for position, (candidate, score) in enumerate(zip(candidates, scores, strict=True))
    ]


def _leg_table(name: str, hits: list[Candidate], timings_ms: dict[str, float], params: RetrievalParams) -> LegTable:
    # Leg lists are copies that later stages leave alone, so `score` is still the leg's own.
    rows = _rows(hits, [hit.score for hit in hits])
    weight = getattr(params.paths, name, None) if params.mode == "multipath" else None
    return LegTable(name, LEG_LABELS.get(name, name.replace("_", " ")), timings_ms.get(name), rows, weight)


def _fused_rows(result: RetrievalResult) -> list[Row]:
    # Rerank rescored these same objects in place: read the fusion score, not `score`.
    fused = result.fused
    columns = [tuple(c.scores.get(leg) for leg in result.legs) for c in fused]
    return _rows(fused, [c.scores.get("fusion") for c in fused], columns)


def _rerank_rows(result: RetrievalResult) -> list[Row]:
    reranked = result.reranked
    if not any("rerank" in c.scores for c in reranked):
        return []
    before = {c.chunk_id: position for position, c in enumerate(result.fused)}
    factors = [tuple(c.scores.get(f"rerank.{factor}") for factor in FACTORS) for c in reranked]
    moved = [before.get(c.chunk_id, position) - position for position, c in enumerate(reranked)]
    return _rows(reranked, [c.scores.get("rerank") for c in reranked], factors, moved)


def _rerank_note(result: RetrievalResult, params: RetrievalParams) -> str:
    """Say why rerank left the fused order alone, when it did."""
    if any("rerank" in c.scores for c in result.reranked) or not result.fused:
        return ""
    if result.mode == "bm25":
        return gettext("Rerank does not run in BM25 mode: its cosine factor needs the vector leg.")
    if not params.rerank:
        return gettext("Rerank is off; the fused order goes on to post-processing.")
    if len(result.fused) < 4:
        text = gettext("Rerank runs only on more than 3 candidates; %(count)s kept their fused order.")
        return text % {"count": len(result.fused)}
    return gettext("Rerank failed and the fused order was kept; the warning above says why.")


def _fusion_label(params: RetrievalParams) -> str:
    if params.mode == "multipath":
        scale = params.paths.bonus_scale
        if not scale:
            return gettext("weighted RRF w/(60+rank) without bonuses")
        if scale == 1:
            return gettext("weighted RRF w/(60+rank) with bonuses")
        return gettext("weighted RRF w/(60+rank) with bonuses ×%(scale)s") % {"scale": f"{scale:g}"}
    fusion = params.fusion
    if fusion.mode == "rrf":
        return f"RRF, k={fusion.rrf_k}"
    text = gettext("weighted: vector %(vector)s / BM25 %(bm25)s")
    return text % {"vector": f"{fusion.vector_weight:g}", "bm25": f"{fusion.bm25_weight:g}"}


def _factor_labels() -> list[str]:
    weights = RerankWeights()
    return [f"{FACTOR_LABELS.get(f, f)} {getattr(weights, f):.0%}" for f in FACTORS]


def _verdict_rows(result: RetrievalResult) -> list[tuple[int, Candidate | None, object]]:
    if result.gate is None:
        return []
    by_id = {c.chunk_id: c for c in result.candidates}
    return [(rank, by_id.get(v.chunk_id), v) for rank, v in enumerate(result.gate.verdicts, 1)]
