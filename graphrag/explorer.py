"""The explorer's reads: batches of nodes with their links, search, a node's detail, filters.

The canvas never receives the whole graph: a batch holds the most mentioned entities (or the
members of the biggest communities first) after the previous one, with the links among what the
browser holds after it, so a KB of thousands of entities opens as fast as a small one and grows
on "Show more". Co-occurrence links (two names in one passage) can be left out: in a large KB
they outnumber the relations documents state and draw a hairball. Every function runs a fixed
number of queries, whatever the graph's size.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, F, Max, Q, QuerySet
from django.utils.translation import gettext_lazy as _

from knowledge.models import KnowledgeBase

from .extraction import CO_OCCURS
from .models import Entity, EntityType, Mention, Relation

BATCH = 500  # nodes per data.json answer unless asked for fewer
LINKS_PER_NODE = 8  # a batch of n nodes sends at most 8n links, strongest first
SEARCH_RESULTS = 20
MENTIONS_SHOWN = 20
NEIGHBOURS_SHOWN = 30
RELATIONS_LISTED = 40

# The node types as the page names them. The model's choices keep their plain labels: a
# translated label there would only add a migration.
TYPE_LABELS = {
    EntityType.TECHNOLOGY: _("Technology"),
    EntityType.CONCEPT: _("Concept"),
    EntityType.STAGE: _("Stage"),
    EntityType.SHORTCUT: _("Shortcut"),
    EntityType.STORAGE: _("Storage"),
    EntityType.FRAMEWORK: _("Framework"),
    EntityType.MODEL: _("Model"),
    EntityType.LAYER: _("Layer"),
    EntityType.PRIORITY: _("Priority"),
    EntityType.TOOL: _("Tool"),
    EntityType.METRIC: _("Metric"),
    EntityType.SECTION: _("Section"),
    EntityType.FIELD: _("Field"),
    EntityType.MODULE: _("Module"),
    EntityType.FILE: _("File"),
    EntityType.CLASS: _("Class"),
    EntityType.FUNCTION: _("Function"),
    EntityType.PERSON: _("Person"),
    EntityType.PLACE: _("Place"),
    EntityType.ORGANIZATION: _("Organisation"),
}


@dataclass(frozen=True)
class GraphQuery:
    offset: int = 0
    limit: int = BATCH
    types: tuple[str, ...] = ()
    relations: tuple[str, ...] = ()
    text: str = ""
    has_cooccurrence: bool = True  # False: only relations a document states, and their entities
    by_community: bool = False  # rank the members of bigger communities first


def graph_batch(kb: KnowledgeBase, query: GraphQuery) -> dict:
    """Return one batch of nodes, ranked by mentions, and the links the client can now draw."""
    entities = _filtered_entities(kb, query)
    total = entities.count()
    end = query.offset + query.limit
    rows = entities.values("id", "name", "type", "mention_count", "community_id")[query.offset : end]
    nodes = [
        {"id": r["id"], "name": r["name"], "type": r["type"], "mentions": r["mention_count"],
         "community": r["community_id"]}
        for r in rows
    ]
    # Both ends ranked before the end of this batch: the client has loaded the earlier ones.
    known = entities.values("pk")[:end]
    links = _links(kb, [node["id"] for node in nodes], known, query)
    next_offset = query.offset + len(nodes)
    return {
        "nodes": nodes, "links": links, "total": total,
        "next_offset": next_offset if nodes and next_offset < total else None,
    }


def _filtered_entities(kb: KnowledgeBase, query: GraphQuery) -> QuerySet[Entity]:
    entities = _matching(Entity.objects.filter(kb=kb), query.text)
    if query.types:
        entities = entities.filter(type__in=query.types)
    if query.relations or not query.has_cooccurrence:
        related = _relations(Relation.objects.filter(kb=kb), query)
        entities = entities.filter(
            Q(pk__in=related.values("source_id")) | Q(pk__in=related.values("target_id"))
        )
    # The pk breaks ties, so batches never overlap or skip an entity.
    ranking = ("-mention_count", "name", "pk")
    if query.by_community:
        ranking = (F("community__size").desc(nulls_last=True), "community_id", *ranking)
    return entities.order_by(*ranking)


def _relations(relations: QuerySet[Relation], query: GraphQuery) -> QuerySet[Relation]:
    if query.relations:
        relations = relations.filter(relation__in=query.relations)
    return relations if query.has_cooccurrence else relations.exclude(relation=CO_OCCURS)


def _matching(entities: QuerySet[Entity], text: str) -> QuerySet[Entity]:
    if not text:
        return entities
    return entities.filter(
        Q(name__icontains=text) | Q(key__icontains=text) | Q(aliases__icontains=text)
    )


def _links(kb: KnowledgeBase, batch: list[int], known: QuerySet, query: GraphQuery) -> list[dict]:
    if not batch:
        return []
    relations = _relations(Relation.objects.filter(kb=kb), query).filter(
        Q(source_id__in=batch, target_id__in=known) | Q(target_id__in=batch, source_id__in=known)
    )
    # One link per pair and relation name, however many documents state it.
    rows = (
        relations.values("source_id", "target_id", "relation")
        .annotate(weight=Max("weight"), evidence=Count("id"))
        .order_by("-weight", "-evidence", "source_id", "target_id")[: len(batch) * LINKS_PER_NODE]
    )
    return [
        {"source": r["source_id"], "target": r["target_id"], "relation": r["relation"], "weight": r["weight"]}
        for r in rows
    ]


def search_entities(kb: KnowledgeBase, text: str) -> list[Entity]:
    if not text:
        return []
    entities = _matching(Entity.objects.filter(kb=kb), text)
    return list(entities.only("id", "name", "type", "mention_count")[:SEARCH_RESULTS])


def page_context(kb: KnowledgeBase) -> dict:
    type_counts = dict(
        Entity.objects.filter(kb=kb).values_list("type").annotate(n=Count("id")).order_by()
    )
    relations = list(
        Relation.objects.filter(kb=kb).values("relation")
        .annotate(n=Count("id"), weight=Max("weight")).order_by("-n", "relation")[:RELATIONS_LISTED + 1]
    )
    cooccurrences = next((row["n"] for row in relations if row["relation"] == CO_OCCURS), 0)
    return {
        # The explicit relations are the filters; co-occurrence has a switch of its own.
        "relations": [row for row in relations if row["relation"] != CO_OCCURS][:RELATIONS_LISTED],
        "cooccurrences": cooccurrences,
        "types": [
            (value, TYPE_LABELS.get(value, label), type_counts.get(value, 0))
            for value, label in EntityType.choices
        ],
        "entity_total": sum(type_counts.values()),
        "build": kb.graph_builds.first(),
        "batch": BATCH,
    }


def entity_context(entity: Entity) -> dict:
    mentions = (
        Mention.objects.filter(entity=entity)
        .select_related("document", "chunk")
        .only(
            "surface", "count", "document__name",
            "chunk__text", "chunk__index", "chunk__section_title", "chunk__document_id",
        )
        .order_by("-count", "document__name", "chunk__index")
    )
    return {
        "entity": entity,
        "type_label": TYPE_LABELS.get(entity.type, entity.get_type_display()),
        "mentions": mentions[:MENTIONS_SHOWN],
        "mention_chunks": mentions.count(),
        "neighbours": _neighbours(entity),
    }


def _neighbours(entity: Entity) -> list[dict]:
    """Return the entity's strongest neighbours, each with the relation that joins them."""
    relations = Relation.objects.filter(kb_id=entity.kb_id)
    outgoing = relations.filter(source=entity).exclude(target=entity).values(
        "relation", other_id=F("target_id"), other_name=F("target__name"), other_type=F("target__type")
    )
    incoming = relations.filter(target=entity).exclude(source=entity).values(
        "relation", other_id=F("source_id"), other_name=F("source__name"), other_type=F("source__type")
    )
    neighbours = []
    for direction, rows in (("out", outgoing), ("in", incoming)):
        strongest = rows.annotate(weight=Max("weight"), evidence=Count("id"))
        strongest = strongest.order_by("-weight", "-evidence", "other_name")[:NEIGHBOURS_SHOWN]
        neighbours += [
            {**row, "direction": direction, "is_explicit": row["weight"] >= Relation.EXPLICIT}
            for row in strongest
        ]
    neighbours.sort(key=lambda row: (-row["weight"], -row["evidence"], row["other_name"]))
    return neighbours[:NEIGHBOURS_SHOWN]
