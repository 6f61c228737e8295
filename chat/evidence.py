"""Evidence items and quote-verification marks, read from pipeline data for display."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_PASSED = {"ok", "verified", "pass", "passed", "supported", "true"}


@dataclass(frozen=True)
class EvidenceItem:
    n: int
    source: str  # "KB" | "GRAPH" | "TOOL"
    doc: str
    section: str
    score: float | None
    preview: str
    url: str


@dataclass(frozen=True)
class Verification:
    checked: int
    flagged: tuple[str, ...]  # sentences whose quote is not in the cited source

    @property
    def is_clean(self) -> bool:
        return not self.flagged


def evidence_items(raw: Iterable[Mapping[str, Any]] | None) -> list[EvidenceItem]:
    """Normalise the pipeline's evidence dicts; drop entries without a number."""
    items = []
    for entry in raw or ():
        if not isinstance(entry, Mapping) or entry.get("n") in (None, ""):
            continue
        items.append(
            EvidenceItem(
                n=int(entry["n"]),
                source=_source(entry.get("source")),
                doc=str(entry.get("doc") or entry.get("doc_name") or ""),
                section=str(entry.get("section") or ""),
                score=_float_or_none(entry.get("score")),
                preview=str(entry.get("preview") or entry.get("quote") or entry.get("text") or ""),
                url=_safe_url(entry.get("url")),
            )
        )
    return sorted(items, key=lambda item: item.n)


def verification_marks(raw: Iterable[Mapping[str, Any]] | None) -> Verification | None:
    """Summarise per-sentence verification results; None when nothing was checked."""
    entries = [entry for entry in raw or () if isinstance(entry, Mapping)]
    if not entries:
        return None
    flagged = tuple(
        str(entry.get("sentence") or entry.get("text") or entry.get("quote") or "")
        for entry in entries
        if not _passed(entry)
    )
    return Verification(checked=len(entries), flagged=flagged)


def _passed(entry: Mapping[str, Any]) -> bool:
    for key in ("verified", "ok", "supported", "passed"):
        if key in entry:
            return bool(entry[key])
    return str(entry.get("status", "ok")).lower() in _PASSED


def _source(value: Any) -> str:
    source = str(value or "").upper()
    return source if source in ("TOOL", "GRAPH") else "KB"


def _float_or_none(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _safe_url(value: Any) -> str:
    # Only our own pages: a link in the evidence panel must never carry a script URL.
    url = str(value or "")
    return url if url.startswith("/") and not url.startswith("//") else ""


def message_evidence(message: Any) -> list[EvidenceItem]:
    """Return the evidence an assistant message was answered from, as stored with it."""
    debug = message.debug if isinstance(message.debug, Mapping) else {}
    stored = debug.get("evidence")
    return evidence_items(stored if isinstance(stored, list) else message.citations)


def message_verification(message: Any) -> Verification | None:
    debug = message.debug if isinstance(message.debug, Mapping) else {}
    return verification_marks(debug.get("verification"))


def fold_agent_step(meta: dict[str, Any], step: Mapping[str, Any]) -> dict[str, Any]:
    """Add one step a multi-step worker reported (thinking, round, plan, task, report) to the
    summary the chat shows above its answer; live events and stored messages use the same fold."""
    kind, data = step.get("type"), {k: v for k, v in step.items() if k != "type"}
    if kind == "thinking":
        meta["thinking"] = str(data.get("text", ""))
    elif kind == "round":
        meta.setdefault("rounds", []).append(data)
    elif kind == "plan":
        meta["plan"] = data
        meta["tasks"] = {t["task_id"]: {**t, "status": "pending"} for t in data.get("tasks", [])}
    elif kind == "task":
        meta.setdefault("tasks", {}).setdefault(str(data.get("task_id", "?")), {}).update(data)
    elif kind == "report":
        meta["report"] = data
    elif kind == "step":
        meta.setdefault("steps", []).append(data)
    return meta


def message_agent_steps(message: Any) -> dict[str, Any]:
    debug = message.debug if isinstance(message.debug, Mapping) else {}
    meta: dict[str, Any] = {}
    for step in debug.get("agent_steps") or ():
        if isinstance(step, Mapping):
            fold_agent_step(meta, step)
    return meta
