"""An English question's words in a Chinese KB's own vocabulary, found by the multilingual encoder.

BM25 shares only identifiers between an English question and a Chinese passage, and the hand-kept
glossary (fusion.CROSS_LANG_TERMS) and the pairs a KB's documents state (knowledge.terms) know
a few hundred product words. The reader's multilingual encoder (USE v3) places a word near its
translation ("temperature" → 温度 at 0.96, "generating code" → 代码生成 at 0.89, "priority" →
优先 at 0.88), so each KB's Chinese words get a vector at ingestion, and a question's English
words and word pairs are looked up among them. The words found are added to the keyword
search as one more variant of the question.

Only the KB's own words can be found, so a translation never brings a word the KB lacks, and
a KB ingested before its words had vectors simply finds none.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from django.conf import settings

from agentic_rag.embeddings import Embedder, embed_queries_cached, text_key

from .analysis import ENGLISH_STOP_WORDS, analyze
from .languages import kb_languages, languages_in, query_language, script_counts
from .meaning import configured_encoder, known_vectors, vocabulary_words
from .models import Chunk, KnowledgeBase
from .pg_search import _BoundedCache
from .search import live_entries

# Measured on the seed documents' words (evaluation.seeds, tuning half): wrong senses ("turns"
# → 绕过, "embedding" → 阻塞) score 0.71–0.75, translations 0.75–0.96.
MIN_COSINE = 0.76
MAX_TERMS = 12  # each found word is one more BM25 term; a question names only a few things
MAX_PHRASES = 24  # words and word pairs embedded for one question
CACHE_BYTES = 64 * 1024 * 1024

_ENGLISH_WORD = re.compile(r"[A-Za-z][a-z]+(?:-[a-z]+)?")
# Words a question is phrased with, which name nothing in the documents: looked up, they find
# a light verb (get → 进行) or a filler (like → 某个) that only adds noise to the search.
_QUESTION_WORDS = frozenset(
    "what which who whom whose when where why how does did get gets got take takes took make makes "
    "like looks look still each many much long large small used use uses using called say says "
    "tell given give gives way ways thing things kind there need needs needed happen happens".split()
)


def question_phrases(question: str) -> list[str]:
    """The question's English content words, then each pair of adjacent ones ("generating code"),
    at most MAX_PHRASES. Identifiers, numbers and Chinese are left to the other legs."""
    runs: list[list[str]] = [[]]
    for match in _ENGLISH_WORD.finditer(question):
        word = match[0].lower()
        follows = match.start() > 0 and question[match.start() - 1] not in " \t\n"
        ends_token = match.end() < len(question) and (question[match.end()].isalnum() or question[match.end()] in "_.")
        if word in ENGLISH_STOP_WORDS or word in _QUESTION_WORDS or len(word) < 3 or ends_token or (follows and question[match.start() - 1] in "_./"):
            runs.append([])
        else:
            runs[-1].append(word)
    words = [word for run in runs for word in run]
    pairs = [f"{run[i]} {run[i + 1]}" for run in runs for i in range(len(run) - 1)]
    return list(dict.fromkeys(words + pairs))[:MAX_PHRASES]


@dataclass(frozen=True)
class Lexicon:
    """A KB version's Chinese words and their unit-length vectors under one encoder."""

    words: tuple[str, ...]
    vectors: np.ndarray  # (words, dims) float16
    # Whether some document of the KB is written in English (under LANGUAGE_SHARE of its
    # words Chinese): an English question may then be answered in its own words.
    has_english_documents: bool = False

    @property
    def nbytes(self) -> int:
        return self.vectors.nbytes + sum(len(word) * 4 + 50 for word in self.words)

    def nearest(self, queries: np.ndarray, min_cosine: float = MIN_COSINE) -> list[tuple[str, float] | None]:
        """Each query vector's nearest word and its cosine, None when below min_cosine."""
        if not self.words or not len(queries):
            return [None] * len(queries)
        cosines = (np.asarray(queries, dtype=np.float32) @ self.vectors.T.astype(np.float32))
        best = cosines.argmax(axis=1)
        return [
            (self.words[j], float(cosines[i, j])) if cosines[i, j] >= min_cosine else None
            for i, j in enumerate(best)
        ]


EMPTY = Lexicon((), np.zeros((0, 0), np.float16))


def build_lexicon(kb: KnowledgeBase, encoder: str) -> Lexicon:
    """The Chinese words of the KB's live child chunks that ingestion gave a vector under encoder."""
    rows = live_entries(kb).filter(level=Chunk.CHILD).values_list("chunk__document_id", "tokens")
    words: set[str] = set()
    scripts: dict[int, Counter[str]] = defaultdict(Counter)
    for document_id, line in rows.iterator():
        words |= vocabulary_words(line.split())
        scripts[document_id].update(script_counts(line))
    english = any(languages_in(counts) == {"en"} for counts in scripts.values())
    by_key = {text_key(word): word for word in sorted(words)}
    found = known_vectors(encoder, list(by_key))
    if not found:
        return EMPTY
    ordered = sorted(found)
    matrix = np.vstack([np.frombuffer(found[key], dtype=np.float16) for key in ordered]).astype(np.float32)
    matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-9)
    return Lexicon(tuple(by_key[key] for key in ordered), matrix.astype(np.float16), english)


# What a KB's content version holds never changes, so each process keeps the lexicons it built.
_LEXICONS = _BoundedCache(CACHE_BYTES)


def kb_lexicon(kb: KnowledgeBase, encoder: str, build: Callable[[KnowledgeBase, str], Lexicon] = build_lexicon) -> Lexicon:
    """The KB's Lexicon at its content version, built once a version in this process."""
    key = (kb.pk, kb.content_version, getattr(kb, "created_at", None), encoder)
    return _LEXICONS.built_once(key, lambda: build(kb, encoder), lambda lexicon: lexicon.nbytes + 200)


def translated_words(question: str, lexicon: Lexicon, embedder: Embedder, *, min_cosine: float = MIN_COSINE) -> list[str]:
    """The lexicon's words for the question's English words and word pairs, at most MAX_TERMS.

    A pair's word comes before its parts' ("generating code" → 代码生成 before 代码): a
    compound is the rarer, more telling term.
    """
    phrases = question_phrases(question)
    if not phrases or not lexicon.words:
        return []
    vectors = np.vstack([_unit(vector) for vector in embed_queries_cached(embedder, phrases)])
    found = [
        (hit, " " in phrase) for phrase, hit in zip(phrases, lexicon.nearest(vectors, min_cosine), strict=True)
        if hit
    ]
    ordered = sorted(found, key=lambda item: (not item[1], -item[0][1]))
    return list(dict.fromkeys(word for (word, _), _ in ordered))[:MAX_TERMS]


@dataclass(frozen=True)
class Translation:
    """A question's words in the KB's Chinese, and what a search for them counts for beside
    the question's own words."""

    words: tuple[str, ...] = ()
    weight: float = 1.0

    def variant(self, question: str) -> str | None:
        """The question with the words after it (None without any): the keyword search then
        matches the Chinese passage on them and on the identifiers the question names."""
        return f"{question} {' '.join(self.words)}" if self.words else None


NONE = Translation()


def translate_question(question: str, kb: KnowledgeBase | None) -> Translation:
    """The KB's words for an English question over a KB with Chinese text (settings.
    LEXICON_EXPANSION, the reader's encoder); none otherwise.

    Over a KB that also holds documents written in English, the question's own words may find
    its answer there, and a translation of its ordinary words ("files" → 文件) finds Chinese
    passages that share only those: its search then counts for LEXICON_MIXED_WEIGHT.
    """
    if kb is None or kb.pk is None or not settings.LEXICON_EXPANSION or query_language(question) != "en":
        return NONE
    if "zh" not in kb_languages(kb):
        return NONE
    encoder = configured_encoder()
    if encoder is None:
        return NONE
    lexicon = kb_lexicon(kb, encoder.name)
    words = tuple(translated_words(question, lexicon, encoder))
    return Translation(words, settings.LEXICON_MIXED_WEIGHT if lexicon.has_english_documents else 1.0)


def _unit(vector: np.ndarray) -> np.ndarray:
    vector = np.asarray(vector, dtype=np.float32)
    return vector / max(float(np.linalg.norm(vector)), 1e-9)
