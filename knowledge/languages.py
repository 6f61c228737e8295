"""Which languages a KB's text is in, and whether a question needs translating to reach it.

Cross-language variants ("向量检索" → "vector retrieval") help a question reach passages in
the other language. Over a KB written in the question's language alone they reach nothing
new: a translated word matches no passage, and the variant's embedding, half in another
language, only moves the vector leg's ranking away from the question's own.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache
from typing import Literal

from .models import Chunk, KnowledgeBase
from .search import live_entries

Language = Literal["zh", "en"]

_HAN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_LATIN = re.compile(r"[A-Za-z]")
# A language counts as the KB's when at least this share of its words are in it: Chinese
# encyclopedia text names English terms in a few words in a hundred, a bilingual manual in
# a third or more.
LANGUAGE_SHARE = 0.1
SAMPLE_ENTRIES = 2000  # child entries read, evenly spaced over the KB, to judge its languages


def query_language(text: str) -> Language:
    """ "zh" when the text holds a Chinese character, else "en"."""
    return "zh" if _HAN.search(text) else "en"


def languages_of(token_lists: Iterable[str], share: float = LANGUAGE_SHARE) -> frozenset[Language]:
    """The languages that at least `share` of the tokens (space-separated strings) are in."""
    counts: Counter[str] = Counter()
    for tokens in token_lists:
        counts.update(script_counts(tokens))
    return languages_in(counts, share)


def script_counts(tokens: str) -> Counter[str]:
    """How many of the tokens (a space-separated string) are Chinese ("zh"), in Latin letters
    ("en"), and in all ("all")."""
    counts: Counter[str] = Counter()
    for token in tokens.split():
        counts["all"] += 1
        if _HAN.search(token):
            counts["zh"] += 1
        elif _LATIN.search(token):
            counts["en"] += 1
    return counts


def languages_in(counts: Counter[str], share: float = LANGUAGE_SHARE) -> frozenset[Language]:
    """The languages that at least `share` of the counted tokens (script_counts) are in."""
    if not counts["all"]:
        return frozenset()
    return frozenset(language for language in ("zh", "en") if counts[language] >= share * counts["all"])


def kb_languages(kb: KnowledgeBase) -> frozenset[Language]:
    """The languages of the KB's searchable text (empty when it has none, or is not stored)."""
    return _kb_languages(kb.pk, kb.content_version) if kb.pk is not None else frozenset()


@lru_cache(maxsize=256)
def _kb_languages(kb_id: int, content_version: int) -> frozenset[Language]:
    # Keyed by content_version: any change to the KB's documents asks again.
    entries = live_entries(KnowledgeBase(pk=kb_id)).filter(level=Chunk.CHILD)
    ids = list(entries.order_by("pk").values_list("pk", flat=True))
    step = max(1, len(ids) // SAMPLE_ENTRIES)
    sample = ids[::step][:SAMPLE_ENTRIES]
    return languages_of(entries.filter(pk__in=sample).values_list("tokens", flat=True).iterator())


def needs_translation(query: str, languages: frozenset[Language]) -> bool:
    """Whether the KB holds text in a language other than the query's (or its languages are unknown)."""
    return not languages or bool(languages - {query_language(query)})
