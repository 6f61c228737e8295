"""Vectors of a document's units for the reader, encoded at ingestion and read at answer time.

The offline reader weighs each unit (agentic_rag.llm.units) of its evidence by a multilingual
encoder's similarity to the question, which is what lets an English question pick a Chinese
sentence. Encoding the units of every passage while the user waits costs more than the rest of
the answer, so each document's units are encoded once, when it is ingested.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
from django.conf import settings

from agentic_rag.embeddings import READER_ENCODER, Embedder, EmbedderUnavailable, get_embedder, text_key
from agentic_rag.llm.units import split_units
from agentic_rag.shutdown import at_batch_boundary

from .ingest import IngestionRun
from .models import UnitVector

MAX_UNIT_KEYS_PER_QUERY = 500  # SQLite allows 999 parameters in one statement


def unit_texts(chunk_texts: Iterable[str]) -> dict[str, str]:
    """The distinct answer units of the chunks, by text_key."""
    return {text_key(unit.text): unit.text for text in chunk_texts for unit in split_units(text) if getattr(unit, "is_answer", True)}


def store_unit_vectors(
    document_id: int, units: dict[str, str], embedder: Embedder, *,
    batch_size: int = 256, between_batches: Callable[[], None] = lambda: None,
) -> int:
    """Encode the units the document has no vector of yet and keep them; return how many."""
    known = set(UnitVector.objects.filter(document_id=document_id, encoder=embedder.name).values_list("key", flat=True))
    missing = [(key, text) for key, text in units.items() if key not in known]
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
    """Encode the units of the version's chunks for the reader (nothing without an encoder), and
    load the encoder's question side too: the cross-language leg embeds the first question asked
    of these documents, and loading its model then (about a second) would fall in that search."""
    embedder = encoder()
    if embedder is None:
        return
    units = unit_texts(chunk.text for chunk in run.stored)
    store_unit_vectors(run.document.pk, units, embedder, between_batches=at_batch_boundary)
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
