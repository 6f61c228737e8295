"""The gate judges first the candidates whose best unit answers: a long chunk's one answering
row is not lost below short passages that share a word with the question."""

from __future__ import annotations

from knowledge.analysis import analyze
from knowledge.candidates import Candidate
from knowledge.unit_rank import best_unit_share, best_units_first

QUESTION = analyze("How much weight does the title match get in the reranker?")
LONG_TABLE = "\n".join([
    "The search runs both legs, fuses them and reranks the head.",
    *(f"Step {n} of the pipeline handles part {n} of the work." for n in range(12)),
    "factor | weight | meaning",
    "cosine | 35% | semantic similarity",
    "title match | 20% | the document title holds query terms",
])


def candidate(chunk_id: int, text: str, section: str = "") -> Candidate:
    return Candidate(chunk_id=chunk_id, doc_id=chunk_id, doc_name=f"{chunk_id}.md", text=text, section_title=section)


def shortlist() -> list[Candidate]:
    return [
        candidate(1, "The reranker runs after fusion."),
        candidate(2, "Each document has a title."),
        candidate(3, "A match of weight classes."),
        candidate(4, LONG_TABLE, "Retrieval"),
        candidate(5, "Unrelated words about deployment."),
    ]


def test_a_best_unit_past_the_cut_replaces_the_weakest_kept_and_follows_the_others():
    ranked = shortlist()

    judged = best_units_first(ranked, [QUESTION], tokenize=analyze, head=5, keep=3)

    assert [c.chunk_id for c in judged] == [1, 3, 4, 2, 5]
    assert "judged before chunk 2" in judged[2].notes[-1]
    assert [c.chunk_id for c in ranked] == [1, 2, 3, 4, 5]  # the ranking itself is not reordered


def test_a_unit_only_a_little_better_does_not_displace_a_kept_candidate():
    ranked = shortlist()

    judged = best_units_first(ranked, [QUESTION], tokenize=analyze, head=5, keep=3, margin=0.9)

    assert [c.chunk_id for c in judged] == [1, 2, 3, 4, 5]
    assert not any(c.notes for c in judged)


def test_nothing_moves_without_candidates_past_the_cut_or_query_terms():
    ranked = shortlist()

    assert best_units_first(ranked[:3], [QUESTION], tokenize=analyze, head=5, keep=3) == ranked[:3]
    assert best_units_first(ranked, [[]], tokenize=analyze, head=5, keep=3) == ranked
    assert best_units_first(ranked, [QUESTION], tokenize=analyze, head=3, keep=3) == ranked


def test_a_units_share_counts_the_section_title_by_half():
    query = set(analyze("title weight"))
    weights = dict.fromkeys(query, 1.0)
    units = [frozenset(analyze("It counts 20%.")), frozenset(analyze("The weight is set per KB."))]

    assert best_unit_share(units, [query], weights, section=set(analyze("Title"))) == 0.75
    assert best_unit_share(units, [query], weights, section=set()) == 0.5
    assert best_unit_share(units[:1], [query], weights, section=set(analyze("Title weight"))) == 0.5


def test_headings_and_drawings_are_not_units_to_measure():
    heading_only = candidate(1, "# Title weight\n\nSomething else.")
    ranked = [candidate(2, "Unrelated."), candidate(3, "Other words."), candidate(4, "More."), heading_only]

    judged = best_units_first(ranked, [analyze("title weight")], tokenize=analyze, head=4, keep=3)

    assert judged == ranked


def test_the_gate_reads_units_only_where_no_reranker_ordered_the_head():
    from types import SimpleNamespace

    from knowledge.retrieval import RetrievalParams, _judged_first

    context = SimpleNamespace(tokens=(tuple(QUESTION),))
    ranked = shortlist()

    unranked = _judged_first(context, ranked, RetrievalParams(rerank=False))
    reranked = _judged_first(context, ranked, RetrievalParams(rerank=True))

    assert [c.chunk_id for c in unranked] == [1, 3, 4, 2, 5]
    assert reranked == ranked
