"""Compare community detection methods on a KB's graph: modularity and time.

Usage: python -m evaluation.probes.community_probe SLUG [SLUG ...]

Runs `graphrag.communities.detect` with each method on the graph the last build wrote and
scores the partition with networkx's modularity (entities no community holds count as their
own), the measurement behind GRAPH_COMMUNITY_METHOD's default.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence


def compare(graph, methods: Sequence[str] = ("louvain", "greedy")) -> list[tuple[str, int, float, float]]:
    """(method, communities, modularity, seconds) for each method on one graph."""
    import networkx as nx

    from graphrag.communities import CommunityParams, detect

    rows = []
    for method in methods:
        started = time.perf_counter()
        parts = detect(graph, CommunityParams(method=method))
        seconds = time.perf_counter() - started
        covered = set().union(*parts) if parts else set()
        partition = parts + [{node} for node in graph.nodes if node not in covered]
        rows.append((method, len(parts), nx.community.modularity(graph, partition, weight="weight"), seconds))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentic_rag.settings")
    import django

    django.setup()
    from graphrag.communities import entity_graph
    from knowledge.models import KnowledgeBase

    for slug in argv if argv is not None else sys.argv[1:]:
        graph = entity_graph(KnowledgeBase.objects.get(slug=slug))
        print(f"{slug}: {graph.number_of_nodes()} entities, {graph.number_of_edges()} edges")
        for method, count, modularity, seconds in compare(graph):
            print(f"  {method:8} {count:5} communities  modularity {modularity:.3f}  {seconds:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
