from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import pytest

from knowledge.candidates import Candidate
from knowledge.postprocess import (
    ContextWindowProcessor,
    DedupProcessor,
    DiversityProcessor,
    PostContext,
    PostProcessingParams,
    PostProcessingPipeline,
    RRFProcessor,
    TruncateProcessor,
    default_pipeline,
    index_neighbours,
    register_postprocessor,
    run_postprocessing,
    unregister_postprocessor,
)

CONTEXT = PostContext(query="q")


def make_candidate(chunk_id: int, score: float = 0.0, **overrides) -> Candidate:
    fields = {
        "doc_id": 1,
        "doc_name": "guide.md",
        "text": f"chunk {chunk_id}: long enough text to keep",
    }
    return Candidate(chunk_id=chunk_id, score=score, **(fields | overrides))


def ids(candidates: list[Candidate]) -> list[int]:
    return [candidate.chunk_id for candidate in candidates]


@pytest.mark.parametrize(("text", "kept"), [("", False), ("  \n", False), ("14 abc", True), ("x" * 20, True)])
def test_it_drops_empty_texts_and_keeps_short_ones(text, kept):
    result = DedupProcessor().process([make_candidate(1, text=text)], CONTEXT)

    assert ids(result) == ([1] if kept else [])


def test_it_puts_texts_under_twenty_chars_after_the_others():
    short = make_candidate(1, 0.9, text="x" * 19)
    long = make_candidate(2, 0.5, text="a longer chunk that answers the question")

    assert ids(DedupProcessor().process([short, long], CONTEXT)) == [2, 1]


def test_it_merges_repeats_of_a_key_into_the_first():
    from_vector = make_candidate(1, 0.8, scores={"vector": 0.8}, sources={"vector"})
    other = make_candidate(2, text="a different chunk with its own text")
    from_bm25 = make_candidate(
        1,
        5.0,
        text="the same chunk, as the keyword index stored it",
        scores={"bm25": 5.0},
        sources={"bm25"},
    )

    result = DedupProcessor().process([from_vector, other, from_bm25], CONTEXT)

    assert result == [from_vector, other]
    assert from_vector.sources == {"vector", "bm25"}
    assert from_vector.scores == {"vector": 0.8, "bm25": 5.0}


def test_it_tells_keys_apart_by_document_and_parent():
    first = make_candidate(1, text="first text long enough to keep")
    other_doc = make_candidate(1, doc_id=2, text="second text long enough to keep")
    other_parent = make_candidate(1, parent_id=9, text="third text long enough to keep")

    assert len(DedupProcessor().process([first, other_doc, other_parent], CONTEXT)) == 3


def test_it_drops_different_chunks_whose_first_300_chars_match():
    shared = "相同的开头" * 60  # 300 chars
    first = make_candidate(1, text=shared + "然后不同的结尾一")
    copy = make_candidate(2, text=shared + "然后不同的结尾二", sources={"bm25"})
    differs_early = make_candidate(3, text="变" + shared)

    result = DedupProcessor().process([first, copy, differs_early], CONTEXT)

    assert ids(result) == [1, 3]
    assert first.sources == {"bm25"}
    assert first.notes == ["dedup: same text as chunk 2"]


def test_it_fuses_sources_by_rrf_over_their_scores():
    both = make_candidate(1, scores={"vector": 0.9, "bm25": 2.0}, sources={"vector", "bm25"})
    vector_only = make_candidate(2, scores={"vector": 0.95}, sources={"vector"})
    bm25_only = make_candidate(3, scores={"bm25": 7.0}, sources={"bm25"})

    result = RRFProcessor().process([vector_only, bm25_only, both], CONTEXT)

    assert ids(result) == [1, 2, 3]
    # vector ranks 2 then 1; bm25 ranks 3 then 1
    assert both.scores["rrf"] == pytest.approx(1 / 62 + 1 / 62)
    assert vector_only.score == pytest.approx(1 / 61)
    assert bm25_only.score == pytest.approx(1 / 61)


def test_it_skips_rrf_for_a_single_source():
    candidates = [
        make_candidate(1, 0.1, scores={"vector": 0.1}, sources={"vector"}),
        make_candidate(2, 0.9, scores={"vector": 0.9}, sources={"vector"}),
    ]

    result = RRFProcessor().process(candidates, CONTEXT)

    assert ids(result) == [1, 2]
    assert all("rrf" not in c.scores for c in result)


@pytest.mark.parametrize("stage", ["fusion", "rerank"])
def test_it_skips_rrf_when_an_earlier_stage_ordered_them(stage):
    candidates = [
        make_candidate(1, scores={"vector": 0.1, stage: 0.5}, sources={"vector"}),
        make_candidate(2, scores={"bm25": 9.0}, sources={"bm25"}),
        make_candidate(3, scores={"vector": 0.9, "bm25": 1.0}, sources={"vector", "bm25"}),
    ]

    assert ids(RRFProcessor().process(candidates, CONTEXT)) == [1, 2, 3]


def test_it_attaches_neighbour_texts_without_adding_candidates():
    texts = {(1, 1, 0): "zero", (1, 1, 1): "one", (1, 1, 2): "two", (1, 0, 0): "parent"}
    middle = make_candidate(1, index=1)
    first = make_candidate(2, index=0)
    context = PostContext(neighbours=index_neighbours(texts))

    result = ContextWindowProcessor().process([middle, first], context)

    assert result == [middle, first]
    assert (middle.metadata["context_before"], middle.metadata["context_after"]) == ("zero", "two")
    assert (first.metadata["context_before"], first.metadata["context_after"]) == ("", "one")


def test_it_skips_the_context_window_without_a_lookup():
    candidate = make_candidate(1)

    ContextWindowProcessor().process([candidate], CONTEXT)

    assert candidate.metadata == {}


def test_it_keeps_at_most_three_chunks_per_document():
    candidates = [make_candidate(i, doc_id=1 if i < 5 else 2) for i in range(7)]

    result = DiversityProcessor().process(candidates, CONTEXT)

    assert ids(result) == [0, 1, 2, 5, 6]
    assert ids(DiversityProcessor(per_document=1).process(candidates, CONTEXT)) == [0, 5]


def test_a_documents_surplus_keeps_its_place_when_other_documents_score_far_below():
    # A question about one document: the others matched a word or two.
    scores = [0.9, 0.8, 0.7, 0.6, 0.5]
    candidates = [make_candidate(i, score) for i, score in enumerate(scores)] + [make_candidate(5, 0.2, doc_id=2)]

    result = DiversityProcessor().process(candidates, CONTEXT)

    assert ids(result) == [0, 1, 2, 3, 4, 5]


def test_a_documents_surplus_gives_way_to_another_document_scoring_near_it():
    scores = [0.9, 0.8, 0.7, 0.6, 0.5]
    candidates = [make_candidate(i, score) for i, score in enumerate(scores)] + [make_candidate(5, 0.35, doc_id=2)]

    result = DiversityProcessor().process(candidates, CONTEXT)

    # 0.6 and 0.5 are below twice 0.35, and give way; the one document's best three stay.
    assert ids(result) == [0, 1, 2, 5]


@pytest.mark.parametrize(("count", "kept"), [(0, 0), (3, 3), (5, 5), (9, 5)])
def test_it_truncates_to_five(count, kept):
    candidates = [make_candidate(i) for i in range(count)]

    assert ids(TruncateProcessor().process(candidates, CONTEXT)) == list(range(kept))


def test_it_runs_the_default_chain_in_seed_order():
    pipeline = default_pipeline()

    assert pipeline.names == ["dedup", "rrf", "context_window", "diversity", "truncate"]


def test_it_builds_the_default_chain_from_params():
    params = PostProcessingParams(per_document=1, top_k=2)
    candidates = [
        make_candidate(i, doc_id=i % 3, text=f"text number {i} long enough") for i in range(9)
    ]

    result, _ = run_postprocessing(candidates, CONTEXT, default_pipeline(params))

    assert ids(result) == [0, 1]


@dataclass(frozen=True)
class Tagger:
    name: str = "tagger"

    def process(self, candidates, context):
        for candidate in candidates:
            candidate.notes.append(f"seen by {self.name}")
        return candidates


@dataclass(frozen=True)
class Failing:
    name: str = "failing"

    def process(self, candidates, context):
        raise RuntimeError("boom")


@pytest.mark.parametrize(
    ("where", "names"),
    [
        ({}, ["dedup", "rrf", "context_window", "diversity", "truncate", "tagger"]),
        (
            {"before": "dedup"},
            ["tagger", "dedup", "rrf", "context_window", "diversity", "truncate"],
        ),
        (
            {"after": "diversity"},
            ["dedup", "rrf", "context_window", "diversity", "tagger", "truncate"],
        ),
    ],
)
def test_it_inserts_processors_where_asked(where, names):
    assert default_pipeline().add(Tagger(), **where).names == names


def test_it_rejects_an_unknown_anchor_or_both_anchors():
    with pytest.raises(ValueError, match="no post-processor named 'nope'"):
        default_pipeline().add(Tagger(), before="nope")
    with pytest.raises(ValueError):
        default_pipeline().add(Tagger(), before="rrf", after="rrf")


def test_it_removes_processors_by_name():
    assert default_pipeline().remove("rrf").names == [
        "dedup",
        "context_window",
        "diversity",
        "truncate",
    ]


def test_it_adds_registered_processors_to_every_default_pipeline():
    register_postprocessor(Tagger, after="rrf")
    try:
        assert default_pipeline().names[:3] == ["dedup", "rrf", "tagger"]
    finally:
        unregister_postprocessor(Tagger)
    assert "tagger" not in default_pipeline().names


def test_it_times_every_processor():
    candidates = [make_candidate(i) for i in range(8)]

    result, timings = run_postprocessing(candidates, CONTEXT, default_pipeline())

    assert len(result) == 3  # all one document: diversity keeps three
    assert list(timings) == ["dedup", "rrf", "context_window", "diversity", "truncate"]
    assert all(ms >= 0 for ms in timings.values())


def test_it_skips_a_failing_processor_when_collecting_warnings():
    pipeline = PostProcessingPipeline([Failing(), Tagger()])
    candidate = make_candidate(1)
    warnings: list[str] = []

    result, timings = run_postprocessing([candidate], CONTEXT, pipeline, warnings=warnings)

    assert result == [candidate]
    assert candidate.notes == ["seen by tagger"]
    assert warnings == ["post-processor failing skipped: RuntimeError: boom"]
    assert list(timings) == ["failing", "tagger"]


def test_it_raises_a_processor_failure_without_a_warnings_list():
    with pytest.raises(RuntimeError, match="boom"):
        run_postprocessing([make_candidate(1)], CONTEXT, PostProcessingPipeline([Failing()]))


def _hundred_candidates() -> list[Candidate]:
    candidates = []
    for i in range(100):
        leg = "vector" if i % 2 else "bm25"
        text = f"第{i % 80}段：检索结果的正文内容，用来测量后处理流水线的耗时。" * 6
        candidates.append(
            make_candidate(
                i % 90,
                doc_id=i % 12,
                index=i,
                text=text,
                scores={leg: 1 - i / 100},
                sources={leg},
            )
        )
    return candidates


def test_it_post_processes_a_hundred_candidates_within_budget():
    texts = {(doc, 1, index): f"neighbour {index}" for doc in range(12) for index in range(101)}
    context = PostContext(query="q", neighbours=index_neighbours(texts))
    pipeline = default_pipeline()
    totals = []
    for _ in range(20):
        candidates = _hundred_candidates()
        started = time.perf_counter()
        result, timings = run_postprocessing(candidates, context, pipeline)
        totals.append((time.perf_counter() - started) * 1000)

    print(
        f"post-processing 100 candidates: median {statistics.median(totals):.3f} ms, "
        f"max {max(totals):.3f} ms; last run {timings}"
    )
    assert len(result) == 5
    assert all("rrf" in c.scores and "context_before" in c.metadata for c in result)
    assert statistics.median(totals) < 50
