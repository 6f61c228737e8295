"""The knowledge_lookup tool: search a knowledge base the asking user may read."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from chat.pipeline.tools import ToolContext

TOP_K = 3
_KB = re.compile(r"\bkb[:=]\s*([A-Za-z0-9_-]+)", re.IGNORECASE)
_VERBS = re.compile(r"查询|搜索|查找|一下|\blook ?up\b|\bsearch(?: for)?\b", re.IGNORECASE)


def extract(message: str) -> dict[str, Any] | None:
    """`{"query", "kb"}` when the message names a KB as `kb:slug`.

    Without one the chat's own KB search answers, with its citations and links, so a
    "搜索 …" question is not turned into a plain-text lookup of the same KB.
    """
    kb = _KB.search(message)
    query = _VERBS.sub(" ", _KB.sub(" ", message)).strip(" ?？。.!！:：")
    if not query or not kb:
        return None
    return {"query": " ".join(query.split()), "kb": kb.group(1)}


def make_handler(retriever: Callable[..., Any] | None = None) -> Callable[[dict, ToolContext], str]:
    """A handler searching with `retriever(query, kb, params)` (knowledge.retrieval.retrieve by default)."""

    def handle(parameters: dict[str, Any], context: ToolContext) -> str:
        from knowledge.models import KnowledgeBase
        from knowledge.retrieval import params_for_kb, retrieve

        kb = _readable_kb(KnowledgeBase, context, parameters.get("kb"))
        if kb is None:
            return "No knowledge base you can read was named or chosen for this search."
        result = (retriever or retrieve)(str(parameters["query"]), kb, params_for_kb(kb, top_k=TOP_K))
        if not result.references:
            return f"Nothing in {kb.name} matches {parameters['query']!r}."
        lines = [f"- {c.doc_name}: {' '.join(c.text.split())[:300]}" for c in result.references[:TOP_K]]
        return f"From the knowledge base {kb.name}:\n" + "\n".join(lines)

    return handle


def _readable_kb(model: Any, context: ToolContext, slug: Any) -> Any:
    """The named KB if the user may read it, else the chat's own KB; never anyone else's."""
    if context.user is None or not context.user.is_authenticated:
        return None
    readable = model.objects.readable_by(context.user)
    if slug:
        return readable.filter(slug=str(slug)).first()
    return readable.filter(pk=context.kb.pk).first() if context.kb is not None else None


PARAMETERS = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "kb": {"type": "string", "description": "a KB slug"}},
    "required": ["query"],
}
