"""{% graph_status kb %}: the KB page's line about its graph, rendered again as a build moves on.

The knowledge app's page and websocket use it by name only: knowledge comes before graphrag
in the dependency chain and imports none of its code.
"""

from __future__ import annotations

from django import template

from graphrag.models import Community, Entity, GraphBuild, Relation

register = template.Library()

# graphrag.build reports reading the documents as 0-90% and the communities as 95%.
READING_SHARE = 90
COMMUNITIES_AT = 95


@register.inclusion_tag("graphrag/graph_status.html")
def graph_status(kb, oob: bool = False, event: dict | None = None) -> dict:
    """`event`: the progress event being relayed, which says how far the build was when sent
    (the row may have moved on by the time the page's socket renders it)."""
    build = GraphBuild.objects.filter(kb=kb).first()  # the newest
    status = event["status"] if event else (build.status if build else "")
    overall = event["percent"] if event else (build.progress if build else 0)
    step = "communities" if overall >= COMMUNITIES_AT else "reading"
    return {
        "kb": kb,
        "oob": oob,
        "build": build,
        "running": status in (GraphBuild.QUEUED, GraphBuild.RUNNING),
        # The reading step's own share, so that its bar ends at 100%, not at 90%.
        "percent": min(100, round(100 * overall / READING_SHARE)),
        "step": step,
        # A round after the first, for documents added while the graph was being built: the page
        # says so, rather than a bar that seems to jump back to 0.
        "updating": bool(build and not build.full and build.status == GraphBuild.RUNNING
                         and GraphBuild.objects.filter(kb=kb, status=GraphBuild.DONE).exists()),
        "entities": Entity.objects.filter(kb=kb).count(),
        "relations": Relation.objects.filter(kb=kb).count(),
        "communities": Community.objects.filter(kb=kb).count(),
    }
