"""The graph explorer of a knowledge base: the page, its nodes and links as JSON, one entity's detail.

The canvas never receives the whole graph: data.json sends the entities in batches, most
mentioned first, with the links among what the browser holds after that batch, so a KB of
thousands of entities opens as fast as a small one and grows on "Show more".
"""

from __future__ import annotations

from dataclasses import dataclass

from django import forms
from django.contrib.auth.decorators import login_required
from django.db.models import Count, F, Max, Q, QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET

from knowledge.models import KnowledgeBase
from knowledge.views import _get_kb_for_user

from .models import Entity, EntityType, Mention, Relation

PAGE = "graphrag/explorer.html"
BATCH = 500  # nodes per data.json answer unless asked for fewer
MAX_BATCH = 1000
LINKS_PER_NODE = 8  # a batch of n nodes sends at most 8n links, strongest first
SEARCH_RESULTS = 20
MENTIONS_SHOWN = 20
NEIGHBOURS_SHOWN = 30
RELATIONS_LISTED = 40


class NamesField(forms.Field):
    """A repeated query parameter (?relation=a&relation=b) of free-text names."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value) -> list[str]:
        names = (str(name).strip()[:64] for name in value or [])
        return list(dict.fromkeys(name for name in names if name))[:100]


class GraphDataForm(forms.Form):
    offset = forms.IntegerField(min_value=0, required=False)
    limit = forms.IntegerField(min_value=1, required=False)
    type = forms.MultipleChoiceField(choices=EntityType.choices, required=False)
    relation = NamesField(required=False)
    q = forms.CharField(max_length=200, required=False)

    def clean_limit(self) -> int:
        # A cap, not an error: a client asking for everything gets the largest batch.
        return min(self.cleaned_data["limit"] or BATCH, MAX_BATCH)

    def query(self) -> GraphQuery:
        data = self.cleaned_data
        return GraphQuery(
            offset=data["offset"] or 0, limit=data["limit"], types=tuple(data["type"]),
            relations=tuple(data["relation"]), text=data["q"],
        )


class SearchForm(forms.Form):
    q = forms.CharField(max_length=200, required=False)


@dataclass(frozen=True)
class GraphQuery:
    offset: int = 0
    limit: int = BATCH
    types: tuple[str, ...] = ()
    relations: tuple[str, ...] = ()
    text: str = ""


@login_required
@require_GET
def graph_explorer(request: HttpRequest, slug: str) -> HttpResponse:
    kb = _get_kb_for_user(request, slug)
    form = SearchForm(request.GET)
    text = form.cleaned_data["q"] if form.is_valid() else ""
    context = {"kb": kb, "q": text, "results": _search(kb, text)}
    return _render(request, kb, "search-results", context)


@login_required
@require_GET
def graph_data(request: HttpRequest, slug: str) -> JsonResponse:
    kb = _get_kb_for_user(request, slug)
    form = GraphDataForm(request.GET)
    if not form.is_valid():
        return JsonResponse({"errors": form.errors}, status=400)
    return JsonResponse(graph_batch(kb, form.query()))


@login_required
@require_GET
def graph_entity(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    kb = _get_kb_for_user(request, slug)
    entities = Entity.objects.filter(kb=kb).select_related("community").defer("embedding")
    entity = get_object_or_404(entities, pk=pk)
    return _render(request, kb, "entity-detail", {"kb": kb, **_entity_context(entity)})


def _render(request: HttpRequest, kb: KnowledgeBase, partial: str, context: dict) -> HttpResponse:
    """Render the partial for htmx and the whole page otherwise."""
    if request.htmx:
        response = render(request, f"{PAGE}#{partial}", context)
    else:
        response = render(request, PAGE, {**_page_context(kb), **context})
    # One URL, two bodies: a cache or the back button must not serve one for the other.
    patch_vary_headers(response, ["HX-Request"])
    return response


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
    if query.relations:
        related = Relation.objects.filter(kb=kb, relation__in=query.relations)
        entities = entities.filter(
            Q(pk__in=related.values("source_id")) | Q(pk__in=related.values("target_id"))
        )
    # The pk breaks ties, so batches never overlap or skip an entity.
    return entities.order_by("-mention_count", "name", "pk")


def _matching(entities: QuerySet[Entity], text: str) -> QuerySet[Entity]:
    if not text:
        return entities
    return entities.filter(
        Q(name__icontains=text) | Q(key__icontains=text) | Q(aliases__icontains=text)
    )


def _links(kb: KnowledgeBase, batch: list[int], known: QuerySet, query: GraphQuery) -> list[dict]:
    if not batch:
        return []
    relations = Relation.objects.filter(kb=kb).filter(
        Q(source_id__in=batch, target_id__in=known) | Q(target_id__in=batch, source_id__in=known)
    )
    if query.relations:
        relations = relations.filter(relation__in=query.relations)
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


def _search(kb: KnowledgeBase, text: str) -> list[Entity]:
    if not text:
        return []
    entities = _matching(Entity.objects.filter(kb=kb), text)
    return list(entities.only("id", "name", "type", "mention_count")[:SEARCH_RESULTS])


def _page_context(kb: KnowledgeBase) -> dict:
    type_counts = dict(
        Entity.objects.filter(kb=kb).values_list("type").annotate(n=Count("id")).order_by()
    )
    relations = (
        Relation.objects.filter(kb=kb).values("relation")
        .annotate(n=Count("id"), weight=Max("weight")).order_by("-n", "relation")[:RELATIONS_LISTED]
    )
    return {
        "types": [(value, label, type_counts.get(value, 0)) for value, label in EntityType.choices],
        "relations": list(relations),
        "entity_total": sum(type_counts.values()),
        "build": kb.graph_builds.first(),
        "batch": BATCH,
    }


def _entity_context(entity: Entity) -> dict:
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
