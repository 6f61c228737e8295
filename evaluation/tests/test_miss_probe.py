from __future__ import annotations

import pytest

from evaluation.probes.miss_probe import STAGES, first_rank, lost_at


def test_first_rank_is_the_first_text_holding_the_keyword_or_an_alternative():
    texts = ["nothing here", "Port 5050 is used", "port 5050 again"]

    assert first_rank("5050", texts) == 2
    assert first_rank(["8080", "PORT 5050"], texts) == 2
    assert first_rank("8080", texts) is None


def _ranks(**given: int | None) -> dict[str, int | None]:
    return {stage: given.get(stage.replace("@deep", "_deep"), 1) for stage in STAGES}


@pytest.mark.parametrize(
    ("given", "where"),
    [
        ({}, ""),
        ({"kb": None, "chat": None}, "not in any chunk"),
        ({"bm25_deep": None, "vec_deep": None, "bm25": None, "vec": None, "chat": None}, "no leg finds it"),
        ({"bm25": None, "vec": None, "fused": None, "chat": None}, "leg_top_k"),
        ({"final": None, "gate": None, "chat": None}, "top_k/postprocess"),
        ({"gate": None, "chat": None}, "gate"),
        ({"chat": None}, "chat"),
        ({"final": None, "gate": None}, ""),  # a compound question's parts found it
    ],
)
def test_lost_at_names_the_first_stage_without_the_keyword(given, where):
    assert lost_at(_ranks(**given), reranks=False) == where


def test_lost_at_names_the_rerank_only_when_the_search_reranks():
    ranks = _ranks(reranked=None, final=None, gate=None, chat=None)

    assert lost_at(ranks, reranks=True) == "rerank"
    assert lost_at(ranks, reranks=False) == "top_k/postprocess"
