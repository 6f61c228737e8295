"""The embedding and indexing stages of ingestion, and re-embedding a knowledge base."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np
from django.conf import settings
from django.db import transaction

from agentic_rag.embeddings import Embedder, get_embedder

from .analysis import analyze
from .ingest import IngestionRun, Stage, register_stage
from .models import Chunk, DocumentStatus, KnowledgeBase, SearchEntry
from .search import refresh_planner_statistics

log = logging.getLogger(__name__)


def index_text(chunk: Chunk) -> str:
    """The text a chunk is searched by: its section title, then its own text."""
    if chunk.level == Chunk.PARENT or not chunk.section_title:
        return chunk.text
    return f"{chunk.section_title}\n{chunk.text}"


def embedder_for(kb: KnowledgeBase) -> Embedder:
    """The embedder that built the KB, recording the default on its first document."""
    if not kb.embedder:
        embedder = get_embedder()
        KnowledgeBase.objects.filter(pk=kb.pk, embedder="").update(embedder=embedder.name)
        kb.refresh_from_db(fields=["embedder"])
    return get_embedder(kb.embedder)


def embed_unique(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """Embed each distinct text once: a section with one paragraph is indexed twice (parent
    and child) with the same text, which is much of a corpus of short passages."""
    distinct = list(dict.fromkeys(texts))
    if len(distinct) == len(texts):
        return embedder.embed_passages(list(texts))
    vectors = embedder.embed_passages(distinct)
    row = {text: i for i, text in enumerate(distinct)}
    return vectors[[row[text] for text in texts]]


def embed_stage(run: IngestionRun) -> None:
    embedder = embedder_for(run.document.kb)
    vectors = embed_unique(embedder, [index_text(chunk) for chunk in run.stored])
    run.vectors = (embedder.name, vectors)


def index_stage(run: IngestionRun) -> None:
    """Write the version's entries under the embedder the KB searches with at this moment.

    The KB row is locked, so a switch to another embedder (reembed_knowledge_base) happens
    wholly before or after: before, the vectors made with the old embedder are made again
    with the new one; after, the switch's catch-up embeds these chunks. A document is never
    left under an embedder its KB no longer searches with.
    """
    embedder_name, vectors = run.vectors
    with transaction.atomic():
        current = _lock_embedder(run.document.kb_id)
        if current and current != embedder_name:
            log.info("%s: the KB moved to %s while it was embedded with %s; embedding again",
                     run.document.name, current, embedder_name)
            vectors = embed_unique(get_embedder(current), [index_text(chunk) for chunk in run.stored])
            embedder_name = current
        entries = _entries(run.stored, vectors, embedder_name)
        SearchEntry.objects.bulk_create(entries, batch_size=500, ignore_conflicts=True)


def _lock_embedder(kb_id: int) -> str:
    """The KB's embedder, its row locked until the transaction ends (SQLite: the database)."""
    return KnowledgeBase.objects.select_for_update().values_list("embedder", flat=True).get(pk=kb_id)


def _entries(chunks: Sequence[Chunk], vectors: np.ndarray, embedder_name: str) -> list[SearchEntry]:
    return [
        SearchEntry(
            chunk_id=chunk.pk,
            kb_id=chunk.kb_id,
            level=chunk.level,
            embedder=embedder_name,
            dims=int(vector.shape[0]),
            embedding=vector,
            tokens=" ".join(analyze(index_text(chunk))),
        )
        for chunk, vector in zip(chunks, vectors, strict=True)
    ]


def register_indexing_stages() -> None:
    register_stage(Stage("embed", DocumentStatus.EMBEDDING, embed_stage))
    register_stage(Stage("index", DocumentStatus.INDEXING, index_stage))


def reembed_knowledge_base(
    kb: KnowledgeBase,
    embedder: Embedder,
    *,
    batch_size: int = 64,
    on_batch: Callable[[int, int], None] = lambda done, total: None,
) -> int:
    """Embed every chunk that has no entry under `embedder`, then switch the KB to it.

    Incremental and safe to repeat: an interrupted run resumes where it stopped, and a run
    after the switch only fills in chunks ingested meanwhile. Returns the chunks embedded.
    """
    done = 0
    while True:
        missing = Chunk.objects.filter(kb=kb).exclude(search_entries__embedder=embedder.name)
        total = done + missing.count()
        batch = list(missing.order_by("pk")[:batch_size])
        if not batch:
            break
        vectors = embed_unique(embedder, [index_text(chunk) for chunk in batch])
        SearchEntry.objects.bulk_create(_entries(batch, vectors, embedder.name), ignore_conflicts=True)
        done += len(batch)
        on_batch(done, total)
    with transaction.atomic():
        previous = _lock_embedder(kb.pk)
        # Chunks that ingestion stored since the last batch: embedded here, under the lock
        # index_stage takes too, so none is switched away from (see index_stage).
        late = list(Chunk.objects.filter(kb=kb).exclude(search_entries__embedder=embedder.name).order_by("pk"))
        if late:
            vectors = embed_unique(embedder, [index_text(chunk) for chunk in late])
            SearchEntry.objects.bulk_create(_entries(late, vectors, embedder.name), ignore_conflicts=True)
            done += len(late)
            on_batch(done, done)
        if previous != embedder.name or done:
            KnowledgeBase.objects.filter(pk=kb.pk).update(embedder=embedder.name)
            SearchEntry.objects.filter(kb=kb).exclude(embedder=embedder.name).delete()
            kb.bump_content_version()
    kb.embedder = embedder.name
    if done:
        refresh_planner_statistics()
    log.info("embedded %s chunks of %s with %s", done, kb.slug, embedder.name)
    return done


def upgrade_target(kb: KnowledgeBase) -> str | None:
    """The embedder a KB should move to in the background, if any (EMBEDDER_UPGRADE)."""
    target = settings.EMBEDDER_UPGRADE
    if not target or target == kb.embedder:
        return None
    return target
