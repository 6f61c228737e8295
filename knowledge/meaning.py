"""Vectors of a document's units for the reader, encoded at ingestion and read at answer time.

The offline reader weighs each unit (agentic_rag.llm.units) of its evidence by a multilingual
encoder's similarity to the question, which is what lets an English question pick a Chinese
sentence. Encoding the units of every passage while the user waits costs more than the rest of
the answer, so each document's units are encoded once, when it is ingested.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

import numpy as np
from django.conf import settings
from django.db.models import Min

from agentic_rag.embeddings import READER_ENCODER, Embedder, EmbedderUnavailable, get_embedder, text_key
from agentic_rag.llm.units import split_units
from agentic_rag.shutdown import at_batch_boundary

from .analysis import analyze
from .ingest import IngestionRun
from .models import UnitVector

MAX_UNIT_KEYS_PER_QUERY = 500  # SQLite allows 999 parameters in one statement
MAX_WORD_CHARS = 8
MAX_WORDS_PER_DOCUMENT = 20_000
_HAN_WORD = re.compile(rf"[\u4e00-\u9fff]{{2,{MAX_WORD_CHARS}}}")


def unit_texts(chunk_texts: Iterable[str]) -> dict[str, str]:
    """The distinct answer units of the chunks, by text_key."""
    return {text_key(unit.text): unit.text for text in chunk_texts for unit in split_units(text) if getattr(unit, "is_answer", True)}


def vocabulary_words(tokens: Iterable[str]) -> set[str]:
    """The Chinese words (2 to MAX_WORD_CHARS ideographs) among search tokens."""
    return {token for token in tokens if _HAN_WORD.fullmatch(token)}


def document_words(chunk_texts: Iterable[str]) -> dict[str, str]:
    """A document's Chinese words, by text_key, for knowledge.lexicon: at most
    MAX_WORDS_PER_DOCUMENT, the shortest first (longer ones are mostly compounds of them)."""
    words = vocabulary_words(token for text in chunk_texts for token in analyze(text))
    kept = sorted(words, key=lambda word: (len(word), word))[:MAX_WORDS_PER_DOCUMENT]
    return {text_key(word): word for word in kept}


def known_vectors(encoder: str, keys: Sequence[str]) -> dict[str, bytes]:
    """One stored vector of each of these keys under the encoder, from whichever document has it."""
    found: dict[str, bytes] = {}
    for start in range(0, len(keys), MAX_UNIT_KEYS_PER_QUERY):
        first = (
            UnitVector.objects.filter(encoder=encoder, key__in=keys[start : start + MAX_UNIT_KEYS_PER_QUERY])
            .values("key").annotate(first=Min("pk")).values_list("first", flat=True)
        )
        found.update((key, bytes(vector)) for key, vector in UnitVector.objects.filter(pk__in=list(first)).values_list("key", "vector"))
    return found


def store_unit_vectors(
    document_id: int, units: dict[str, str], embedder: Embedder, *,
    batch_size: int = 256, between_batches: Callable[[], None] = lambda: None, reuse: bool = False,
) -> int:
    """Encode the units the document has no vector of yet and keep them; return how many.

    With reuse, a text another document already has a vector of gets a copy of it instead: the
    words of a KB's vocabulary (knowledge.lexicon) recur in most of its documents."""
    known = set(UnitVector.objects.filter(document_id=document_id, encoder=embedder.name).values_list("key", flat=True))
    missing = [(key, text) for key, text in units.items() if key not in known]
    if reuse:
        copied = known_vectors(embedder.name, [key for key, _ in missing])
        UnitVector.objects.bulk_create(
            [UnitVector(document_id=document_id, encoder=embedder.name, key=key, vector=vector) for key, vector in copied.items()],
            batch_size=500, ignore_conflicts=True,
        )
        missing = [(key, text) for key, text in missing if key not in copied]
    for start in range(0, len(missing), batch_size):
        between_batches()
        batch = missing[start : start + batch_size]
        vectors = embedder.embed_passages([text for _, text in batch])
        UnitVector.objects.bulk_create(
            [
                UnitVector(document_id=document_id, encoder=embedder.name, key=key, vector=np.asarray(v, dtype=np.float16).tobytes())
                for (key, _), v in zip(batch, vectors, strict=True)
            ],
            batch_size=500, ignore_conflicts=True,
        )
    return len(missing)


def configured_encoder() -> Embedder | None:
    """settings.READER_ENCODER's embedder; None when it is off or its package is not installed."""
    name = getattr(settings, "READER_ENCODER", READER_ENCODER)
    try:
        return get_embedder(name) if name else None
    except EmbedderUnavailable:
        return None


def unit_vectors_stage(run: IngestionRun, *, encoder: Callable[[], Embedder | None] = configured_encoder) -> None:
    """Encode the units of the version's chunks for the reader and their Chinese words for
    knowledge.lexicon (nothing without an encoder), and
    load the encoder's question side too: the cross-language leg embeds the first question asked
    of these documents, and loading its model then (about a second) would fall in that search."""
    embedder = encoder()
    if embedder is None:
        return
    texts = [chunk.text for chunk in run.stored]
    store_unit_vectors(run.document.pk, unit_texts(texts), embedder, between_batches=at_batch_boundary)
    store_unit_vectors(run.document.pk, document_words(texts), embedder, between_batches=at_batch_boundary, reuse=True)
    embedder.embed_query(WARM_UP_QUESTION)


WARM_UP_QUESTION = "warm up"


class UnitVectorStore:
    """agentic_rag.embeddings.VectorStore over the vectors ingestion kept."""

    def load(self, encoder: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        for start in range(0, len(keys), MAX_UNIT_KEYS_PER_QUERY):
            rows = UnitVector.objects.filter(encoder=encoder, key__in=keys[start : start + MAX_UNIT_KEYS_PER_QUERY])
            for key, vector in rows.values_list("key", "vector"):
                found[key] = np.frombuffer(bytes(vector), dtype=np.float16).astype(np.float32)
        return found
