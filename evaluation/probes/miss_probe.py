"""Where a golden question's answer is lost between the KB and the chat's evidence.

Usage: python -m evaluation.probes.miss_probe --kb SLUG --golden-set NAME
       [--only-failing] [--deep N]

For every question with expected keywords it prints, per keyword, the rank (1-based, "-" when
absent) of the first chunk holding it (its text or section title) at each stage:

  kb       any chunk of the KB at all (no: the keyword spans chunks or is not in the documents)
  bm25@N / vec@N   each leg searched N deep, past the search's own leg_top_k
  bm25 / vec       each leg as the search runs it (leg_top_k)
  fused, reranked  fusion's list and the rerank's (when the KB reranks)
  final            the search's top_k after post-processing
  gate             the quality gate's references
  chat             the evidence the chat handed the answerer (its rewrite, compound parts and
                   evidence gate included)

and a last column naming the first stage that lost it (blank when the chat's evidence holds it:
a compound question's parts are searched one by one, so its own search may miss what they find). The totals per stage close the listing.
Run it against the database the KB and the golden set were imported into (seeds_eval leaves them).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

import django


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentic_rag.settings")
    django.setup()


STAGES = ("kb", "bm25@deep", "vec@deep", "bm25", "vec", "fused", "reranked", "final", "gate", "chat")


def first_rank(keyword: str | list[str], texts: Sequence[str]) -> int | None:
    """The 1-based rank of the first text holding the keyword (or one of its alternatives)."""
    alternatives = [keyword] if isinstance(keyword, str) else list(keyword)
    folded = [a.casefold() for a in alternatives]
    for rank, text in enumerate(texts, 1):
        held = text.casefold()
        if any(a in held for a in folded):
            return rank
    return None


def lost_at(ranks: dict[str, int | None], reranks: bool) -> str:
    """The first stage of the pipeline whose list no longer holds the keyword ("" when the chat has it)."""
    if ranks["chat"] is not None:
        return ""  # a compound question's parts or the rewrite found what the question's own search missed
    if ranks["kb"] is None:
        return "not in any chunk"
    if ranks["bm25@deep"] is None and ranks["vec@deep"] is None:
        return "no leg finds it"
    if ranks["bm25"] is None and ranks["vec"] is None:
        return "leg_top_k"
    order = ["fused", *(["reranked"] if reranks else []), "final", "gate"]
    for stage in order:
        if ranks[stage] is None:
            return {"fused": "fusion", "reranked": "rerank", "final": "top_k/postprocess"}.get(stage, stage)
    return "chat"  # the evidence gate, or the rewrite or compound parts searched for something else


def _texts(candidates: Sequence[Any]) -> list[str]:
    return [f"{c.section}\n{c.text}" for c in candidates]


def _shown(evidence: dict[str, Any]) -> str:
    """What an evidence item showed the answerer, as evaluation.answers.score_answer reads it."""
    from evaluation.answers import chunk_text_from_db, next_chunk_text_from_db

    chunk_id, chars = int(evidence["chunk_id"]), evidence.get("chars")
    text = chunk_text_from_db(chunk_id)
    if chars and chars > len(text):
        text = f"{text}\n{next_chunk_text_from_db(chunk_id)}"
    return f"{evidence.get('section', '')}\n{text[:chars]}"


def probe(kb_slug: str, golden_set: str, *, deep: int, only_failing: bool, out=sys.stdout) -> Counter:
    from chat.agent_support import search_params
    from chat.cli import command_user
    from chat.pipeline.options import ChatOptions
    from evaluation.answers import chat_asker, delete_conversations, load_answer_cases
    from knowledge.models import Chunk, KnowledgeBase
    from knowledge.retrieval import params_for_kb, retrieve

    kb = KnowledgeBase.objects.get(slug=kb_slug)
    cases = [c for c in load_answer_cases(kb, golden_set=golden_set) if c.keywords]
    chunks = list(Chunk.objects.filter(kb=kb, level=Chunk.CHILD).values_list("section_title", "text"))
    kb_texts = [f"{section}\n{text}" for section, text in chunks]
    user = kb.owner if kb.owner_id else command_user(None, None)
    conversations: list[int] = []
    ask = chat_asker(kb, user, conversations=conversations)
    # The params the chat's workers search with (chat.agent_support.search_params), at the chat's top_k.
    params = search_params(kb, params_for_kb(kb).mode, top_k=ChatOptions().top_k, rerank=None)
    deep_params = dataclasses.replace(params, leg_top_k=deep, gate=None, postprocess=False, rerank=False)
    losses: Counter = Counter()
    header = f"{'qid':16} {'keyword':24} " + " ".join(f"{s:>9}" for s in STAGES) + "  lost at"
    fusion = params.fusion
    print(f"{kb.slug} ({kb.embedder}); {params.mode}, leg_top_k {params.leg_top_k}, top_k {params.top_k}, "
          f"rerank {params.reranks}, fusion {fusion.mode} {fusion.vector_weight}/{fusion.bm25_weight}, "
          f"gate passes {params.gate.submit_top_k if params.gate else '-'}", file=out)
    print(header, file=out)
    try:
        for case in cases:
            wide = retrieve(case.question, kb, deep_params)
            run = retrieve(case.question, kb, params)
            result = ask(case.question)
            shown = [_shown(e) for e in result.evidence if e.get("chunk_id")]
            lists = {
                "kb": kb_texts,
                "bm25@deep": _texts(wide.legs.get("bm25", [])), "vec@deep": _texts(wide.legs.get("vector", [])),
                "bm25": _texts(run.legs.get("bm25", [])), "vec": _texts(run.legs.get("vector", [])),
                "fused": _texts(run.fused), "reranked": _texts(run.reranked),
                "final": _texts(run.candidates), "gate": _texts(run.references), "chat": shown,
            }
            rows = []
            for keyword in case.keywords:
                ranks = {stage: first_rank(keyword, texts) for stage, texts in lists.items()}
                where = lost_at(ranks, params.reranks)
                rows.append((keyword, ranks, where))
            if only_failing and not any(where for _, _, where in rows):
                continue
            print(f"{case.qid}: {case.question}  [shortcut {result.shortcut or '-'}]", file=out)
            for keyword, ranks, where in rows:
                label = "/".join(keyword) if isinstance(keyword, list) else keyword
                cells = " ".join(f"{'-' if ranks[s] is None else ranks[s]:>9}" for s in STAGES)
                print(f"  {'':14} {label[:24]:24} {cells}  {where}", file=out)
                losses[where or "kept"] += 1
    finally:
        delete_conversations(conversations)
    print("keywords by the stage that lost them: " + ", ".join(f"{k} {v}" for k, v in losses.most_common()), file=out)
    return losses


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kb", required=True, help="the KB's slug")
    parser.add_argument("--golden-set", required=True, help="the golden set's name in that KB")
    parser.add_argument("--deep", type=int, default=200, help="how deep each leg is searched for its own column")
    parser.add_argument("--only-failing", action="store_true", help="list only questions with a lost keyword")
    args = parser.parse_args(argv)
    _setup()
    probe(args.kb, args.golden_set, deep=args.deep, only_failing=args.only_failing)


if __name__ == "__main__":
    main()
