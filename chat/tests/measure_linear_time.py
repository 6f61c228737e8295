"""Print the CPU time a long one-character chat message costs each pre-retrieval stage.

Run: python -m chat.tests.measure_linear_time [--chars 4000] [--answer]

Each row is one message of `--chars` copies of one character (and one of digits with "+1"),
timed with time.process_time through the rule stages a chat runs before retrieval: rewrite,
intent (with every built-in tool's keyword rules), the tool channel's parameter extraction,
the KB router's graph-question test and its tokenizer; then query expansion and tagging, which
retrieval and indexing run. `--answer` adds the extractive reader's whole answer to that
message over the demo documents.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

# The stages before retrieval ("pre-retr" sums them), then what retrieval and indexing run.
PRE_RETRIEVAL = ("rewrite", "intent", "tools", "route", "analyze")
AFTER = ("expand", "tags")
CHARACTERS = ("9", "a", " ", "|", "`", "*", "中", ".", "-", "#", "(", "，", "\n", "_", "1.")


def _stages() -> dict[str, Callable[[str], object]]:
    from chat.pipeline.intent import rule_intents
    from chat.pipeline.rewrite import rewrite_rules
    from chat.pipeline.tools import get_tool_channel
    from chat.routing_kb import auto_agent
    from knowledge.analysis import analyze
    from knowledge.fusion import expand_query
    from knowledge.tagging import extract_tags

    channel = get_tool_channel()
    tools = channel.available()
    return {
        "rewrite": rewrite_rules,
        "intent": lambda m: rule_intents(m, (), tools),
        "tools": lambda m: channel.plan(m, tuple(sorted(tools))),
        "route": auto_agent,
        "analyze": analyze,
        "expand": expand_query,
        "tags": extract_tags,
    }


def _answer(message: str) -> str:
    from agentic_rag.llm.base import Message
    from agentic_rag.llm.extractive import ExtractiveProvider
    from knowledge.analysis import analyze

    docs = sorted(Path("docs").glob("*.md"))[:3]
    documents = "".join(
        f'<document id="{n}" doc="{path.name}">{path.read_text()[:6000]}</document>' for n, path in enumerate(docs, 1)
    )
    prompt = f"<documents>{documents}</documents><question>{message}</question>"
    return ExtractiveProvider(tokenize=analyze).answer([Message("user", prompt)])


def _cpu_ms(function: Callable[[str], object], message: str) -> float:
    started = time.process_time()
    function(message)
    return (time.process_time() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chars", type=int, default=4000)
    parser.add_argument("--answer", action="store_true", help="also time the extractive answer")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentic_rag.settings")
    import django

    django.setup()
    stages = _stages()
    for function in stages.values():  # warm the caches (jieba's dictionary, compiled patterns)
        function("warm up 预热")
    messages = {repr(c): (c * args.chars)[: args.chars] for c in CHARACTERS}
    messages["'9'*n+'+1'"] = "calculate " + "9" * (args.chars - 12) + "+1"
    header = ["message", *PRE_RETRIEVAL, "pre-retr", *AFTER] + (["answer"] if args.answer else [])
    print(" ".join(f"{h:>9}" for h in header))
    for label, message in messages.items():
        before = [_cpu_ms(stages[name], message) for name in PRE_RETRIEVAL]
        after = [_cpu_ms(stages[name], message) for name in AFTER]
        row = [*before, sum(before), *after] + ([_cpu_ms(_answer, message)] if args.answer else [])
        print(f"{label:>9} " + " ".join(f"{t:9.1f}" for t in row))


if __name__ == "__main__":
    main()
