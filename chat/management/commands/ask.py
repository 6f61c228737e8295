"""manage.py ask "QUESTION" [--kb SLUG] [--agent TYPE] [--session ID] [--user USERNAME] [--json]"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from chat.cli import command_user
from chat.pipeline import ChatOptions, ChatRefused, ChatRequest, ChatResult, run_chat
from chat.routing_kb import InvalidWorkerName, parse_worker_name


class Command(BaseCommand):
    help = "Ask a question through the chat pipeline, as the browser and the API do."

    def add_arguments(self, parser) -> None:
        parser.add_argument("question")
        parser.add_argument("--kb", metavar="SLUG", help="the knowledge base to search")
        parser.add_argument(
            "--agent", default="auto", help="the worker type, or a worker name KB:TYPE[:MODE] (default: auto)"
        )
        parser.add_argument("--session", metavar="ID", help="continue this conversation (default: a new one)")
        parser.add_argument(
            "--user", metavar="USERNAME", help="ask as this user (default: the KB's owner, else the demo user)"
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args, **options) -> None:
        kb, agent_type = _kb_and_agent(options["kb"], options["agent"])
        user = command_user(options["user"], kb)
        request = ChatRequest(user, options["session"], options["question"], ChatOptions(kb_slug=kb, agent_type=agent_type))
        try:
            result = run_chat(request, emit=lambda event: None)
        except ChatRefused as refused:
            raise CommandError(str(refused)) from refused
        if options["json"]:
            self.stdout.write(json.dumps(result.as_json(), ensure_ascii=False))
        else:
            self._print(result)
        if result.status == "failed":
            raise CommandError(result.error)

    def _print(self, result: ChatResult) -> None:
        self.stdout.write(result.answer)
        if result.citations:
            self.stdout.write("\nCitations:")
            reasons = {(v["n"], v["quote"]): v["reason"] for v in result.verification}
            for citation in result.citations:
                reason = reasons.get((citation["n"], citation["quote"])) or "not verified"
                mark = "" if citation["verified"] else f"  ({reason})"
                chunk = f" #{citation['chunk_id']}" if citation["chunk_id"] is not None else ""  # tools have none
                self.stdout.write(f"  [{citation['n']}] {citation['doc']}{chunk}: {citation['quote']}{mark}")
        shortcut = f" · shortcut {result.shortcut}" if result.shortcut else ""
        self.stdout.write(f"\nIntent {result.intent or '-'} · route {result.route or '-'}{shortcut} · trace {result.trace_id}")
        for stage in result.stages:
            self.stdout.write(f"  {stage.name:10} {stage.ms:8.1f} ms  {stage.status:8} {stage.detail}")
        first = f"{result.first_token_ms:.1f} ms" if result.first_token_ms is not None else "-"
        self.stdout.write(f"  {'total':10} {result.total_ms:8.1f} ms  (first token {first}; session {result.session_id})")


def _kb_and_agent(kb: str | None, agent: str) -> tuple[str | None, str]:
    """The KB and agent type that --kb and --agent name; --agent may be a worker name."""
    try:
        spec = parse_worker_name(agent)
    except InvalidWorkerName as error:
        raise CommandError(str(error)) from error
    if spec.kb_prefix and kb and kb != spec.kb_prefix:
        raise CommandError(f"--agent names the KB {spec.kb_prefix!r} but --kb is {kb!r}")
    return kb or spec.kb_prefix or None, spec.agent_type or "auto"
