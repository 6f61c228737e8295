"""Build or update a KB's graph: read changed documents, link mentions, recompute communities.

A build is incremental: a document is read again only when its fingerprint (live version and
content hash) differs from the one recorded in GraphDocument, and each document is written
in one transaction together with its new fingerprint. A build stopped half-way (a killed
worker) leaves whole documents behind it, so the next build resumes where it stopped, and no
entity is ever created twice (keys are unique per KB). Deleted documents take their mentions
and relations with them (cascade); their entities are recounted and, left unmentioned, removed.
Only the communities that hold an entity whose mentions changed are recomputed.
"""

from __future__ import annotations

import re
import resource
import time
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from agentic_rag.shutdown import at_batch_boundary
from knowledge.chunking import count_tokens
from knowledge.models import Chunk, Document, DocumentStatus, KnowledgeBase

from .communities import CommunityParams, recompute
from .disambiguation import DisambiguationParams, EntityIndex, link, name_vectors
from .extraction import CO_OCCURS, PART_OF, Extraction, Mention, TermDictionary, Triple, dictionary_for, extract, normalise
from .llm_extraction import estimate_tokens
from .models import Community, Entity, EntityType, GraphBuild, GraphDocument, Relation
from .models import Mention as MentionRow
from .titles import document_titles, title_line

Extractor = Callable[[str, TermDictionary], Extraction]
Progress = Callable[[int, str], None]

# Co-occurrence is a weak edge: a document keeps at most this many per entity (the pairs seen
# most often) and never more than the relations it states, so stated relations are always
# the majority of what the explorer and the graph leg walk.
COOCCURRENCES_PER_ENTITY = 2


@dataclass
class BuildReport:
    entities: int = 0
    relations: int = 0
    communities: int = 0
    documents: int = 0  # documents read in this build
    llm_calls: int = 0
    llm_tokens_estimated: int = 0
    seconds: float = 0.0
    chunks: int = 0
    communities_recomputed: int = 0
    peak_memory_mb: float = 0.0  # peak RSS of the process that built
    chunks_per_s: float = 0.0  # extraction and disambiguation throughput
    dry_run: bool = False
    extractor: str = "rules"
    log: list[str] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict:
        return asdict(self)


def fingerprint(document: Document) -> str:
    return f"{document.live_version}:{document.sha256}"


def documents_to_read(kb: KnowledgeBase, *, full: bool, extractor_name: str) -> list[Document]:
    """The KB's searchable documents whose graph facts are missing or out of date."""
    live = list(Document.objects.filter(kb=kb, live_version__gt=0).exclude(status=DocumentStatus.FAILED).order_by("id"))
    if full:
        return live
    known = {
        document_id: (stored, extractor)
        for document_id, stored, extractor in GraphDocument.objects.filter(kb=kb).values_list(
            "document_id", "fingerprint", "extractor"
        )
    }
    return [d for d in live if known.get(d.id) != (fingerprint(d), extractor_name)]


def kb_dictionary(kb: KnowledgeBase) -> TermDictionary:
    """The built-in terms plus the KB's own headings and tags."""
    chunks = Chunk.objects.filter(kb=kb).live()
    headings = set(chunks.exclude(section_title="").values_list("section_title", flat=True).distinct())
    headings |= set(chunks.exclude(chapter_level_2="").values_list("chapter_level_2", flat=True).distinct())
    tags = {tag for row in chunks.children().values_list("tags", flat=True)[:20000] for tag in row or ()}
    # A plain-text article's title line names it as a heading would: another article that
    # writes it mentions the title's entity (graphrag.titles).
    headings |= {title.title for title in document_titles(kb).values() if not title.from_heading}
    return dictionary_for(headings, tags)


def build_graph(
    kb: KnowledgeBase,
    *,
    full: bool = False,
    dry_run: bool = False,
    extractor: Extractor = extract,
    extractor_name: str = "rules",
    llm_extraction: bool = False,
    community_params: CommunityParams = CommunityParams(),
    summarise: Callable[[str, list[str]], str] | None = None,
    on_progress: Progress | None = None,
    after_interruption: bool = False,
) -> BuildReport:
    """Bring the graph of `kb` up to date with its documents (all of them when `full`).

    `after_interruption`: a build stopped half-way before this one, after storing documents
    whose entities it never recounted or regrouped; this build recounts and regroups them all.
    """
    started = time.perf_counter()
    report = BuildReport(dry_run=dry_run, extractor=extractor_name)
    try:
        documents = documents_to_read(kb, full=full, extractor_name=extractor_name)
        chunk_rows = _child_chunks(documents)
        report.documents, report.chunks = len(documents), sum(len(rows) for rows in chunk_rows.values())
        if llm_extraction:
            texts = [text for rows in chunk_rows.values() for _, text in rows]
            report.llm_calls, report.llm_tokens_estimated = len(texts), estimate_tokens(texts, count_tokens)
        if dry_run:
            _count(kb, report)
            return report
        if full:
            _clear(kb)
        deleted = GraphDocument.objects.filter(kb=kb, document__isnull=True)
        touched = {e for ids in deleted.values_list("entity_ids", flat=True) for e in ids}
        touched |= _read_documents(kb, documents, chunk_rows, extractor, report, on_progress)
        if after_interruption:
            touched |= set(Entity.objects.filter(kb=kb).values_list("id", flat=True))
        step = time.perf_counter()
        touched |= _recount(kb, touched)
        deleted.delete()
        report.timings_ms["recount"] = _ms(step)
        step = time.perf_counter()
        if on_progress:
            on_progress(95, "communities")
        scope = None if full or after_interruption else touched
        if scope is None or scope:
            report.communities_recomputed = recompute(kb, scope, community_params, summarise=summarise)
        report.timings_ms["communities"] = _ms(step)
        _count(kb, report)
    finally:
        # The process's peak resident set (Linux reports KiB): what a worker needs for this KB.
        report.peak_memory_mb = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        report.seconds = round(time.perf_counter() - started, 3)
    return report


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 1)


def _count(kb: KnowledgeBase, report: BuildReport) -> None:
    report.entities = Entity.objects.filter(kb=kb).count()
    report.relations = Relation.objects.filter(kb=kb).count()
    report.communities = Community.objects.filter(kb=kb).count()


def _clear(kb: KnowledgeBase) -> None:
    with transaction.atomic():
        Community.objects.filter(kb=kb).delete()
        Entity.objects.filter(kb=kb).delete()  # mentions and relations cascade
        GraphDocument.objects.filter(kb=kb).delete()


def _child_chunks(documents: Sequence[Document]) -> dict[int, list[tuple[int, str]]]:
    rows: dict[int, list[tuple[int, str]]] = defaultdict(list)
    ids = [d.id for d in documents]
    for start in range(0, len(ids), 500):
        chunks = Chunk.objects.filter(document_id__in=ids[start : start + 500]).live().children()
        for document_id, chunk_id, text in chunks.order_by("document_id", "index").values_list("document_id", "id", "text"):
            rows[document_id].append((chunk_id, text))
    return rows


def _chunk_sections(document: Document) -> dict[int, tuple[str, ...]]:
    """Each child chunk's section path, outermost first, as the parser recorded it."""
    rows = Chunk.objects.filter(document=document).live().children().values_list(
        "id", "chapter_level_1", "chapter_level_2", "section_title"
    )
    return {chunk_id: tuple(dict.fromkeys(t.strip() for t in titles if t and t.strip())) for chunk_id, *titles in rows}


def _titled_sections(sections: dict[int, tuple[str, ...]], rows: Sequence[tuple[int, str]]) -> dict[int, tuple[str, ...]]:
    """A document without headings whose text starts with a title line: that line is the
    section of each of its chunks, as a first heading would be."""
    if any(sections.values()) or not rows:
        return sections
    title = title_line(rows[0][1])
    return {chunk_id: (title,) for chunk_id, _ in rows} if title else sections


def with_sections(extraction: Extraction, path: Sequence[str]) -> Extraction:
    """The chunk's extraction plus the sections it sits in: a section entity each (mentioned
    by the chunk), each section `part_of` the one above it."""
    names = [name[:200] for name in path if 2 <= len(name) <= 120]
    previous = None
    for name in names:
        key = normalise(name)
        if not key:
            continue
        extraction.mentions.append(Mention(name, key, EntityType.SECTION, -1))
        if previous and previous != key:
            extraction.relations.append(Triple(key, PART_OF, previous))
        previous = key
    return extraction


# A more specific type wins over "concept" when one document names an entity both ways (a
# heading the dictionary knows as a concept, written as a section).
_WEAK_TYPES = frozenset({EntityType.CONCEPT})


def _load_index(kb: KnowledgeBase) -> tuple[EntityIndex, dict[str, int]]:
    index = EntityIndex(name_vectors)
    ids: dict[str, int] = {}
    for entity_id, key, name, vector in Entity.objects.filter(kb=kb).values_list("id", "key", "name", "embedding"):
        index.add(key, name, np.frombuffer(vector, dtype=np.float32) if vector else None)
        ids[key] = entity_id
    return index, ids


def _read_documents(kb, documents, chunk_rows, extractor, report, on_progress) -> set[int]:
    """Extract, link and store each document in its own transaction; return touched entity ids."""
    dictionary = kb_dictionary(kb)
    index, ids = _load_index(kb)
    params = DisambiguationParams()
    touched: set[int] = set()
    timings = Counter()
    for number, document in enumerate(documents, 1):
        at_batch_boundary()
        step = time.perf_counter()
        sections = _titled_sections(_chunk_sections(document), chunk_rows.get(document.id, []))
        extractions = [
            (chunk_id, with_sections(extractor(text, dictionary), sections.get(chunk_id, ())))
            for chunk_id, text in chunk_rows.get(document.id, [])
        ]
        timings["extract"] += time.perf_counter() - step
        step = time.perf_counter()
        links = _link_all(extractions, index, params, dictionary)
        timings["disambiguate"] += time.perf_counter() - step
        step = time.perf_counter()
        with transaction.atomic():
            state = GraphDocument.objects.filter(document=document).first()
            touched |= set(state.entity_ids if state else ())
            touched |= set(MentionRow.objects.filter(document=document).values_list("entity_id", flat=True))
            MentionRow.objects.filter(document=document).delete()
            Relation.objects.filter(document=document).delete()
            texts = dict(chunk_rows.get(document.id, []))
            mentioned = _store(kb, document, extractions, links, index, ids, texts)
            touched |= mentioned
            GraphDocument.objects.update_or_create(
                document=document,
                defaults={
                    "kb": kb, "fingerprint": fingerprint(document), "extractor": report.extractor,
                    "entity_ids": sorted(mentioned),
                },
            )
        timings["store"] += time.perf_counter() - step
        if on_progress:
            on_progress(round(90 * number / len(documents)), "extracting")
    report.timings_ms.update({k: round(v * 1000, 1) for k, v in timings.items()})
    reading_s = timings["extract"] + timings["disambiguate"]
    report.chunks_per_s = round(report.chunks / reading_s, 1) if reading_s else 0.0
    return touched


def _link_all(
    extractions, index: EntityIndex, params: DisambiguationParams, dictionary: TermDictionary
) -> dict[str, tuple[str, str]]:
    """Mention key → (entity key, type) for every mention of one document."""
    links: dict[str, tuple[str, str]] = {}
    for _, extraction in extractions:
        for mention in extraction.mentions:
            if mention.key in links:
                entity_key, kind = links[mention.key]
                if kind in _WEAK_TYPES and mention.type not in _WEAK_TYPES:
                    links[mention.key] = (entity_key, mention.type)
                continue
            found = link(mention.key, mention.surface, index, params)
            if found.new:
                # A known term keeps its own spelling ("GraphRAG"), whatever a path wrote first.
                index.add(mention.key, dictionary.name_of(mention.key) or mention.surface)
            links[mention.key] = (found.key, mention.type)
    return links


def _store(kb, document, extractions, links, index: EntityIndex, ids: dict[str, int], texts: dict[int, str]) -> set[int]:
    new_keys = list(dict.fromkeys(key for key, _ in links.values() if key not in ids))
    if new_keys:
        types: dict[str, str] = {}
        for key, kind in links.values():
            if types.get(key) in (None, *_WEAK_TYPES):
                types[key] = kind
        vectors = name_vectors([index.names[k] for k in new_keys])
        described = _first_sentences(extractions, links, texts, set(new_keys))
        created = Entity.objects.bulk_create(
            Entity(
                kb=kb, key=key, name=index.names[key][:200], type=types[key],
                embedding=vector.astype(np.float32).tobytes(), description=described.get(key, ""),
            )
            for key, vector in zip(new_keys, vectors, strict=True)
        )
        if any(e.pk is None for e in created):  # backends that do not return ids
            created = list(Entity.objects.filter(kb=kb, key__in=new_keys))
        ids.update({e.key: e.pk for e in created})
        for entity, vector in zip(new_keys, vectors, strict=True):
            index.vectors[entity] = vector
    mentions: dict[tuple[int, int], list] = {}
    explicit: dict[tuple[int, str, int], list[int]] = defaultdict(list)
    together: dict[tuple[int, int], list[int]] = defaultdict(list)
    aliases: dict[int, set[str]] = defaultdict(set)
    for chunk_id, extraction in extractions:
        for mention in extraction.mentions:
            entity_id = ids[links[mention.key][0]]
            row = mentions.setdefault((entity_id, chunk_id), [mention.surface, 0])
            row[1] += 1
            aliases[entity_id].add(mention.surface)
        for triple in extraction.relations:
            source, target = ids[links[triple.source][0]], ids[links[triple.target][0]]
            if source != target:
                explicit[(source, triple.relation, target)].append(chunk_id)
        for a, b in extraction.co_occurrences:
            source, target = sorted((ids[links[a][0]], ids[links[b][0]]))
            if source != target:
                together[(source, target)].append(chunk_id)
    MentionRow.objects.bulk_create(
        MentionRow(entity_id=e, chunk_id=c, document=document, surface=s[:200], count=n) for (e, c), (s, n) in mentions.items()
    )
    Relation.objects.bulk_create(
        [
            Relation(kb=kb, document=document, source_id=s, target_id=t, relation=r, weight=Relation.EXPLICIT, evidence=sorted(set(c))[:20])
            for (s, r, t), c in explicit.items()
        ]
        + [
            Relation(kb=kb, document=document, source_id=s, target_id=t, relation=CO_OCCURS, weight=Relation.CO_OCCURRENCE, evidence=sorted(set(c))[:20])
            for (s, t), c in strongest_cooccurrences(together, explicit, per_entity=COOCCURRENCES_PER_ENTITY).items()
        ],
        batch_size=1000,
    )
    _add_aliases(aliases)
    return set(aliases)


_SENTENCE_END = re.compile(r"(?<=[。！？!?；;])|(?<=\.)\s|\n")


def _first_sentences(extractions, links, texts: dict[int, str], keys: set[str]) -> dict[str, str]:
    """Each new entity's description offline: the first sentence that names it (a model's
    extraction keeps the same: a sentence of the document, never a generated one)."""
    found: dict[str, str] = {}
    for chunk_id, extraction in extractions:
        text = texts.get(chunk_id, "")
        ends: _SentenceEnds | None = None
        for mention in extraction.mentions:
            key = links[mention.key][0]
            # Mention offsets count from their paragraph: find the name in the chunk instead.
            at = text.find(mention.surface) if key in keys and key not in found else -1
            if at >= 0:
                ends = ends or _SentenceEnds(text)
                found[key] = " ".join(ends.sentence_at(at).split()).strip(" #>*-|")[:300]
    return found


class _SentenceEnds:
    """A text's sentence ends, found once: read from the start for each name, a text naming
    many would be read as many times."""

    def __init__(self, text: str) -> None:
        self.text = text
        matches = list(_SENTENCE_END.finditer(text))
        self.starts = [m.start() for m in matches]
        self.ends = [m.end() for m in matches]  # in order too: the matches do not overlap

    def sentence_at(self, at: int) -> str:
        """The sentence holding position at: from the last end at or before it to the next end after it."""
        before = bisect_right(self.ends, at)
        after = bisect_left(self.starts, at + 1)
        start = self.ends[before - 1] if before else 0
        end = self.starts[after] if after < len(self.starts) else len(self.text)
        return self.text[start:end]


def strongest_cooccurrences(
    together: dict[tuple[int, int], list[int]], explicit: dict[tuple[int, str, int], list[int]], *, per_entity: int
) -> dict[tuple[int, int], list[int]]:
    """The co-occurrences a document keeps: the pairs seen in most chunks first, at most
    `per_entity` for each entity, none for a pair a stated relation already joins, and no
    more in all than the document's stated relations."""
    stated = {(min(s, t), max(s, t)) for s, _, t in explicit}
    budget = len(explicit)
    kept: dict[tuple[int, int], list[int]] = {}
    degree: Counter[int] = Counter()
    for pair, chunks in sorted(together.items(), key=lambda item: (-len(set(item[1])), item[0])):
        if len(kept) >= budget:
            break
        a, b = pair
        if pair in stated or degree[a] >= per_entity or degree[b] >= per_entity:
            continue
        kept[pair] = chunks
        degree[a] += 1
        degree[b] += 1
    return kept


def _add_aliases(aliases: dict[int, set[str]]) -> None:
    entities = list(Entity.objects.filter(id__in=aliases).only("id", "name", "aliases"))
    changed = []
    for entity in entities:
        extra = sorted(s for s in aliases[entity.id] if s != entity.name and s not in entity.aliases)
        if extra:
            entity.aliases = (entity.aliases + extra)[:20]
            changed.append(entity)
    Entity.objects.bulk_update(changed, ["aliases"], batch_size=500)


def _recount(kb: KnowledgeBase, entity_ids: set[int]) -> set[int]:
    """Store the mention counts of `entity_ids`, delete the unmentioned ones; return the ids
    whose count changed."""
    changed: set[int] = set()
    ids = sorted(entity_ids)
    for start in range(0, len(ids), 500):  # SQLite takes a bounded number of parameters
        batch = ids[start : start + 500]
        changed |= _store_counts(MentionRow.objects.filter(entity_id__in=batch), Entity.objects.filter(id__in=batch))
    return changed


def _store_counts(mentions, entities) -> set[int]:
    counted = dict(mentions.values("entity_id").annotate(n=Sum("count")).values_list("entity_id", "n"))
    stored = dict(entities.values_list("id", "mention_count"))
    changed = {e for e, n in stored.items() if counted.get(e, 0) != n}
    orphans = [e for e in changed if not counted.get(e)]
    Entity.objects.filter(id__in=orphans).delete()
    updates = [Entity(id=e, mention_count=counted[e]) for e in changed if counted.get(e)]
    Entity.objects.bulk_update(updates, ["mention_count"], batch_size=500)
    return changed


def finish(build: GraphBuild, report: BuildReport | None, error: str = "") -> None:
    """Record a build's outcome on its row."""
    if report is not None:
        for name in ("documents", "entities", "relations", "communities", "llm_calls", "timings_ms"):
            setattr(build, name, getattr(report, name))
        build.log = "\n".join(report.log)
    build.status = GraphBuild.FAILED if error else GraphBuild.DONE
    build.error = error
    build.progress = 100 if not error else build.progress
    build.finished_at = timezone.now()
    build.save()
