"""What a KB's graph holds: how its entities are typed and how many relations a document states.

A graph whose entities are nearly all "concept" and whose relations are nearly all
co-occurrence says little more than the text's word counts; these figures tell whether it does.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from django.db.models import Count

from knowledge.models import KnowledgeBase

from .extraction import CO_OCCURS
from .models import Entity, Relation


@dataclass
class GraphStats:
    kb: str
    entities: int = 0
    relations: int = 0
    explicit_relations: int = 0
    types: dict[str, int] = field(default_factory=dict)  # entity type → count, most first
    relation_types: dict[str, int] = field(default_factory=dict)  # relation → count, most first

    @property
    def explicit_share(self) -> float:
        return self.explicit_relations / self.relations if self.relations else 0.0

    @property
    def concept_share(self) -> float:
        return self.types.get("concept", 0) / self.entities if self.entities else 0.0

    def as_json(self) -> dict:
        return {**asdict(self), "explicit_share": round(self.explicit_share, 4), "concept_share": round(self.concept_share, 4)}


def graph_stats(kb: KnowledgeBase) -> GraphStats:
    """The KB's entity type distribution and its relations by type, in two queries."""
    types = Entity.objects.filter(kb=kb).values_list("type").annotate(n=Count("id")).order_by("-n", "type")
    relations = Relation.objects.filter(kb=kb).values_list("relation").annotate(n=Count("id")).order_by("-n", "relation")
    stats = GraphStats(kb=kb.slug, types=dict(types), relation_types=dict(relations))
    stats.entities = sum(stats.types.values())
    stats.relations = sum(stats.relation_types.values())
    stats.explicit_relations = stats.relations - stats.relation_types.get(CO_OCCURS, 0)
    return stats
