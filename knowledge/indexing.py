"""The embedding and indexing stages of ingestion, and re-embedding a knowledge base."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np
from django.conf import settings
from django.db import transaction

from agentic_rag.embeddings import Embedder, get_embedder
from agentic_rag.shutdown import at_batch_boundary

from .analysis import analyze
from .ingest import IngestionRun, Stage, register_stage
from .models import Chunk, Document, DocumentStatus, KnowledgeBase, SearchEntry
from .search import refresh_planner_statistics
from .meaning import unit_vectors_stage
from .terms import store_term_pairs

log = logging.getLogger(__name__)

# Vectors a re-embedding run keeps to reuse for a later batch's equal texts (~6 MB of e5's).
KNOWN_VECTORS = 4096


def index_text(chunk: Chunk) -> str:
    """The text a chunk is searched by: its section title, then its own text.

    Laid out as its parent's text is (title, blank line, body), so the child of a section
    short enough for one child has its parent's very text, and is embedded once for both.
    """
    if chunk.level == Chunk.PARENT or not chunk.section_title:
        return chunk.text
    return f"{chunk.section_title}\n\n{chunk.text}"


def embedder_for(kb: KnowledgeBase) -> Embedder:
    """The embedder that built the KB, recording the default on its first document."""
    if not kb.embedder:
        embedder = get_embedder()
        KnowledgeBase.objects.filter(pk=kb.pk, embedder="").update(embedder=embedder.name)
        kb.refresh_from_db(fields=["embedder"])
    return get_embedder(kb.embedder)


def embed_unique(embedder: Embedder, texts: Sequence[str], known: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """Embed each distinct text once: a section with one paragraph is indexed twice (parent
    and child) with the same text, which is most of a corpus of short sections.

    `known` holds vectors of texts embedded before (by an earlier batch of the same run);
    those are reused, and this call's vectors are added to it. Embeds EMBEDDER_BATCH_SIZE
    texts at a time, so a stopping process waits for one model call, not a document's worth.
    """
    if not texts:  # no call for nothing: a remote embedder would probe its dimension
        return np.zeros((0, 0), dtype=np.float32)
    known = {} if known is None else known
    missing = [text for text in dict.fromkeys(texts) if text not in known]
    size = max(settings.EMBEDDER_BATCH_SIZE, 1)
    for start in range(0, len(missing), size):
        if start:
            at_batch_boundary()
        batch = missing[start : start + size]
        known.update(zip(batch, embedder.embed_passages(batch), strict=True))
    return np.vstack([known[text] for text in texts])


def embed_stage(run: IngestionRun) -> None:
    """Embed the version's chunks, reusing the live version's entries for unchanged ones."""
    kb = run.document.kb
    # The row loaded when the run started may predate a switch; embedding with its
    # embedder would only be done again at the index stage.
    kb.refresh_from_db(fields=["embedder"])
    embedder = embedder_for(kb)
    known = live_entries(run.document, embedder.name)
    reused = [known.get(_reuse_key(chunk)) for chunk in run.stored]
    fresh = [position for position, entry in enumerate(reused) if entry is None]
    embedded = iter(embed_unique(embedder, [index_text(run.stored[position]) for position in fresh]))
    rows = [entry[0] if entry else next(embedded) for entry in reused]
    run.vectors = (embedder.name, np.vstack(rows).astype(np.float32, copy=False))
    run.tokens = [entry[1] if entry else None for entry in reused]
    run.embedded_chunks, run.reused_chunks = len(fresh), len(rows) - len(fresh)


def live_entries(document: Document, embedder_name: str) -> dict[tuple[int, str, str], tuple[np.ndarray, str]]:
    """The live version's (vector, tokens) under an embedder, by what its search text is made of.

    A new version mostly repeats the old one; its unchanged chunks need not be embedded again.
    """
    if not document.live_version:
        return {}
    entries = SearchEntry.objects.filter(
        chunk__document_id=document.pk, chunk__version=document.live_version, embedder=embedder_name
    ).select_related("chunk").only("embedding", "tokens", "chunk__level", "chunk__sha256", "chunk__section_title")
    return {_reuse_key(entry.chunk): (entry.embedding, entry.tokens) for entry in entries}


def _reuse_key(chunk: Chunk) -> tuple[int, str, str]:
    """Equal for two chunks exactly when their index_text and level are: the chunk's sha256 is
    that of its text, so neither text is loaded or hashed again."""
    title = chunk.section_title if chunk.level == Chunk.CHILD else ""
    return chunk.level, chunk.sha256, title


def index_stage(run: IngestionRun) -> None:
    """Write the version's entries under the embedder the KB searches with when they are written.

    The check and the write share one transaction that locks the KB row (SQLite: the whole
    database, its transactions being IMMEDIATE), and the switch to another embedder
    (reembed_knowledge_base) takes the same lock, so it lands wholly before or after the
    write. Before: the chunks are embedded again with the new embedder, outside the lock so
    a slow model never holds it, and checked again. After: the switch catches them up.
    A document is never left under an embedder its KB no longer searches with.
    """
    embedder_name, vectors = run.vectors
    chunks = run.stored
    while True:
        with transaction.atomic():
            current = _lock_embedder(run.document.kb_id)
            if not current or current == embedder_name:
                tokens = run.tokens if chunks is run.stored else None
                entries = _entries(chunks, vectors, embedder_name, tokens=tokens)
                SearchEntry.objects.bulk_create(entries, batch_size=500, ignore_conflicts=True)
                return
        log.info("%s: the KB moved to %s while it was embedded with %s; embedding again",
                 run.document.name, current, embedder_name)
        # The switch's scan may have embedded some of them already.
        chunks = list(Chunk.objects.filter(pk__in=[chunk.pk for chunk in run.stored]).without_entry(current))
        vectors = embed_unique(get_embedder(current), [index_text(chunk) for chunk in chunks])
        embedder_name = current


def _lock_embedder(kb_id: int) -> str:
    """The KB's embedder, its row locked until the transaction ends (SQLite: the database)."""
    return KnowledgeBase.objects.select_for_update().values_list("embedder", flat=True).get(pk=kb_id)


def _entries(
    chunks: Sequence[Chunk], vectors: np.ndarray, embedder_name: str, *, tokens: Sequence[str | None] | None = None
) -> list[SearchEntry]:
    tokens = tokens or [None] * len(chunks)
    return [
        SearchEntry(
            chunk_id=chunk.pk,
            kb_id=chunk.kb_id,
            level=chunk.level,
            embedder=embedder_name,
            dims=int(vector.shape[0]),
            embedding=vector,
            tokens=" ".join(analyze(index_text(chunk))) if known is None else known,
        )
        for chunk, vector, known in zip(chunks, vectors, tokens, strict=True)
    ]


def terms_stage(run: IngestionRun) -> None:
    """Keep the bilingual term pairs the document states, for its KB's query expansion."""
    sections = run.parsed.sections if run.parsed else ()
    text = "\n".join(f"{section.title}\n{section.text}" for section in sections)
    store_term_pairs(run.document.pk, run.document.kb_id, text)


def register_indexing_stages() -> None:
    register_stage(Stage("embed", DocumentStatus.EMBEDDING, embed_stage))
    register_stage(Stage("index", DocumentStatus.INDEXING, index_stage))
    register_stage(Stage("terms", DocumentStatus.INDEXING, terms_stage))
    register_stage(Stage("meaning", DocumentStatus.INDEXING, unit_vectors_stage))


def reembed_knowledge_base(
    kb: KnowledgeBase,
    embedder: Embedder,
    *,
    batch_size: int = 64,
    on_batch: Callable[[int, int], None] = lambda done, total: None,
) -> int:
    """Embed every chunk that has no entry under `embedder`, then switch the KB to it.

    Incremental and safe to repeat: an interrupted run resumes where it stopped, and a run
    after the switch only fills in chunks ingested meanwhile (or left under another
    embedder). Returns the chunks embedded; `on_batch(done, total)` hears the progress.
    """
    done = 0
    while True:
        done = _embed_missing(kb, embedder, batch_size=batch_size, done=done, on_batch=on_batch)
        late = _switch(kb, embedder, limit=batch_size, has_embedded=done > 0)
        if late is not None:
            break
    if late:
        done += late
        on_batch(done, done)
    kb.embedder = embedder.name
    if done:
        refresh_planner_statistics()
    log.info("embedded %s chunks of %s with %s", done, kb.slug, embedder.name)
    return done


def _embed_missing(
    kb: KnowledgeBase, embedder: Embedder, *, batch_size: int, done: int, on_batch: Callable[[int, int], None]
) -> int:
    """Embed, batch by batch and outside any lock, the KB's chunks with no entry under `embedder`."""
    missing = Chunk.objects.filter(kb=kb).without_entry(embedder.name)
    on_batch(done, done + missing.count())
    # A parent and its child that share a text can fall into different batches.
    known: dict[str, np.ndarray] = {}
    while batch := list(missing.order_by("pk")[:batch_size]):
        at_batch_boundary()
        _embed_into_entries(batch, embedder, known)
        done += len(batch)
        on_batch(done, done + missing.count())
        if len(known) > KNOWN_VECTORS:
            known.clear()
    return done


def _switch(kb: KnowledgeBase, embedder: Embedder, *, limit: int, has_embedded: bool) -> int | None:
    """Switch the KB to `embedder` once every chunk has an entry under it; return the late ones.

    Chunks stored since the scan are embedded here, under the lock index_stage takes, so
    no ingestion writes under the old embedder after the switch and none is missed. Only a
    batch of them, though: the lock blocks every writer (SQLite), so past `limit` this
    returns None without switching and the caller scans again.
    """
    with transaction.atomic():
        previous = _lock_embedder(kb.pk)
        late = list(Chunk.objects.filter(kb=kb).without_entry(embedder.name).order_by("pk")[: limit + 1])
        if len(late) > limit:
            return None
        if late:
            _embed_into_entries(late, embedder)
        if previous != embedder.name or late or has_embedded:
            KnowledgeBase.objects.filter(pk=kb.pk).update(embedder=embedder.name)
            SearchEntry.objects.filter(kb=kb).exclude(embedder=embedder.name).delete()
            kb.bump_content_version()
    return len(late)


def _embed_into_entries(
    chunks: Sequence[Chunk], embedder: Embedder, known: dict[str, np.ndarray] | None = None
) -> None:
    vectors = embed_unique(embedder, [index_text(chunk) for chunk in chunks], known)
    with transaction.atomic():  # SQLite splits a bulk insert into statements: a batch is whole
        SearchEntry.objects.bulk_create(_entries(chunks, vectors, embedder.name), ignore_conflicts=True)


def upgrade_target(kb: KnowledgeBase) -> str | None:
    """The embedder a KB should move to in the background, if any (EMBEDDER_UPGRADE)."""
    target = settings.EMBEDDER_UPGRADE
    if not target or target == kb.embedder:
        return None
    return target


def background_target(kb: KnowledgeBase) -> str | None:
    """The embedder to run over the KB in the background, if any.

    EMBEDDER_UPGRADE while the KB is not on it; else the KB's own embedder when a live
    chunk has no vector under it. Ingestion left such documents before index_stage checked
    for a switch: "Ready", yet no search finds them, so they are embedded again.
    """
    target = upgrade_target(kb)
    if target:
        return target
    if kb.embedder and Chunk.objects.for_kb(kb).live().without_entry(kb.embedder).exists():
        return kb.embedder
    return None
