"""manage.py fusion_bench: each leg, rank-bm25 and the default hybrid, scored in one run."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

pytestmark = pytest.mark.django_db


def test_it_scores_rank_bm25_each_leg_and_the_default_hybrid_in_one_run(imported_kb, tmp_path):
    out, path = io.StringIO(), tmp_path / "legs.json"

    call_command("fusion_bench", "--kb", "tiny", "--fusions", "weighted:0.7", "--json", str(path), stdout=out, stderr=io.StringIO())

    [report] = json.loads(path.read_text())
    rows = report["rows"]
    assert {"rank-bm25", "bm25", "vector, rerank off", "hybrid, current default", "hybrid weighted 0.7/0.3, rerank off"} <= set(rows)
    assert report["questions"] == 5
    # The keyword leg and rank-bm25 share tokens and formula: they rank the tiny set alike.
    assert rows["bm25"] == pytest.approx(rows["rank-bm25"])
    table = out.getvalue()
    assert "| row | nDCG@10 | Recall@5 | Recall@10 | Hit@5 | MRR@10 |" in table
    assert all(f"\n| {name} | " in table for name in rows)


def test_it_names_a_missing_kb():
    with pytest.raises(CommandError, match="no knowledge base 'nowhere'"):
        call_command("fusion_bench", "--kb", "nowhere", stdout=io.StringIO())
