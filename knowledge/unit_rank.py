"""Which candidates the quality gate judges first: a chunk whose best unit answers the question
takes the place of a kept one whose best unit holds clearly less of it.

Whole-chunk scores favour short chunks: BM25 normalises by length, and a long chunk's vector
averages all it says. The table row that answers "how much weight does the title match get"
sinks with the 1,100-character section holding it below passages that share a word or two with
the question. The reader quotes units (sentences, list items, table rows), not chunks; so before
the gate cuts the ranking's head to its submit_top_k, each head candidate is measured by its
best unit, and one past the cut replaces the weakest kept one only when its best unit holds
clearly more (PROMOTION_MARGIN). Kept candidates keep their order and promoted ones follow them,
since the reader trusts earlier passages more; the ranking itself is left as retrieval made it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache

from agentic_rag.llm.units import split_units

from .candidates import Candidate

Tokenize = Callable[[str], list[str]]

# How much more of the question's weighted terms a promoted candidate's best unit must hold than
# the kept one it replaces. Chosen on the seeds dev set's two tuning halves (seeds_eval --half
# tune, tune-2), where 0.10 promoted passages that share common words and 0.25 too few.
PROMOTION_MARGIN = 0.15
UNIT_CACHE_TEXTS = 4096
SECTION_SHARE = 0.5  # a term only the candidate's section title holds counts half, as in the reader


def best_units_first(
    ranked: Sequence[Candidate], queries: Sequence[Sequence[str]], *,
    tokenize: Tokenize, head: int, keep: int, margin: float = PROMOTION_MARGIN,
) -> list[Candidate]:
    """ranked with its first `keep` chosen from its first `head` by their best units (see above).

    `queries` are the search's token lists: the question's and each cross-language variant's.
    """
    top = list(ranked[:head])
    terms = [set(tokens) for tokens in queries if tokens]
    if len(top) <= keep or keep <= 0 or not terms:
        return list(ranked)
    units = [_unit_terms(candidate.text, tokenize) for candidate in top]
    weights = _rarity([_text_terms(candidate.text, tokenize) for candidate in top], terms)
    shares = [best_unit_share(held, terms, weights, set(tokenize(c.section_title))) for held, c in zip(units, top, strict=True)]
    kept = list(range(keep))
    for j in range(keep, len(top)):
        weakest = min(kept, key=lambda k: (shares[k], -k))  # the lowest, the later of equals
        if shares[j] > shares[weakest] + margin:
            kept.remove(weakest)
            kept.append(j)
            top[j].notes.append(
                f"judged before chunk {top[weakest].chunk_id}: its best unit holds {shares[j]:.2f} "
                f"of the question's terms, that one's {shares[weakest]:.2f}"
            )
    rest = [i for i in range(len(top)) if i not in kept]
    return [top[i] for i in kept + rest] + list(ranked[head:])


def best_unit_share(
    units: Sequence[frozenset[str]], queries: Sequence[set[str]], weights: Mapping[str, float], section: set[str]
) -> float:
    """The largest share of a query's weighted terms that one unit holds (`units`: each answer
    unit's terms), the section title's terms counting SECTION_SHARE."""
    totals = [(query, sum(weights[t] for t in query)) for query in queries]
    best = 0.0
    for held in units:
        for query, total in totals:
            share = sum(weights[t] for t in query & held) + SECTION_SHARE * sum(weights[t] for t in (query & section) - held)
            best = max(best, share / total)
    return best


# The chunks a KB's questions reach recur (and a compound question's parts share some): a
# chunk's text is split and analysed once per process, not once per search.
@lru_cache(maxsize=UNIT_CACHE_TEXTS)
def _unit_terms(text: str, tokenize: Tokenize) -> tuple[frozenset[str], ...]:
    """The terms of each unit of text that may be quoted on its own."""
    return tuple(frozenset(tokenize(unit.text)) for unit in split_units(text) if unit.is_answer)


@lru_cache(maxsize=UNIT_CACHE_TEXTS)
def _text_terms(text: str, tokenize: Tokenize) -> frozenset[str]:
    return frozenset(tokenize(text))


def _rarity(texts: Sequence[frozenset[str]], queries: Sequence[set[str]]) -> Counter[str]:
    """Each query term's inverse frequency among the candidates' texts (a term none holds counts
    as one that one holds: the question's words the passages lack weigh as much as its rarest)."""
    held = Counter(term for terms in texts for term in terms)
    n = len(texts)
    return Counter({term: math.log(1 + (n + 1) / max(held[term], 1)) for query in queries for term in query})
