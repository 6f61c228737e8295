"""Evidence items and quote-verification marks, read from pipeline data for display."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote as percent_encode

_PASSED = {"ok", "verified", "pass", "passed", "supported", "true"}
WINDOW_CHARS = 600  # an evidence card shows about this much of its text
LEAD_CHARS = 160  # of which, at most this much comes before the quote
# Between two words of a quote the source may hold spacing or Markdown marks.
_GAP = r"[\s*_`|>#]+"
_EDGES = " \t\r\n.。!！?？;；:：,，、\"'“”‘’()（）*_`"
_DIRECTIVE_WORDS = 4  # a text fragment names the quote by its first and last words


@dataclass(frozen=True)
class EvidenceItem:
    n: int
    source: str  # "KB" | "GRAPH" | "TOOL" | "WEB" | "MEMORY"
    doc: str
    section: str
    score: float | None
    preview: str
    url: str
    # The window of text around the cited quote, when an answer quoted this item.
    before: str = ""
    quote: str = ""
    after: str = ""

    @property
    def page_url(self) -> str:
        """The URL without the text directive that opens it at the quote."""
        return self.url.split("#:~:", 1)[0].removesuffix("#")


@dataclass(frozen=True)
class Verification:
    checked: int
    flagged: tuple[str, ...]  # sentences whose quote is not in the cited source
    unanswered: tuple[str, ...] = ()  # sentences quoted from their source that may not answer the question

    @property
    def is_clean(self) -> bool:
        return not (self.flagged or self.unanswered)

    @property
    def state(self) -> str:
        """"verified", "may_not_answer" (every quote found, some may not answer) or "unverified"."""
        return "unverified" if self.flagged else "may_not_answer" if self.unanswered else "verified"


def evidence_items(raw: Iterable[Mapping[str, Any]] | None) -> list[EvidenceItem]:
    """Normalise the pipeline's evidence dicts; drop entries without a number."""
    items = []
    for entry in raw or ():
        if not isinstance(entry, Mapping) or entry.get("n") in (None, ""):
            continue
        source = _source(entry.get("source"))
        items.append(
            EvidenceItem(
                n=int(entry["n"]),
                source=source,
                doc=str(entry.get("doc") or entry.get("doc_name") or ""),
                section=str(entry.get("section") or ""),
                score=_float_or_none(entry.get("score")),
                preview=str(entry.get("preview") or entry.get("quote") or entry.get("text") or ""),
                url=_safe_url(entry.get("url"), source),
            )
        )
    return sorted(items, key=lambda item: item.n)


def verification_marks(raw: Iterable[Mapping[str, Any]] | None) -> Verification | None:
    """Summarise per-sentence verification results; None when nothing was checked."""
    entries = [entry for entry in raw or () if isinstance(entry, Mapping)]
    if not entries:
        return None
    # Entries stored before the "may_not_answer" status count as their `verified` flag says.
    unanswered = [entry for entry in entries if entry.get("status") == "may_not_answer"]
    flagged = [entry for entry in entries if not _passed(entry) and entry.get("status") != "may_not_answer"]
    return Verification(checked=len(entries), flagged=_sentences(flagged), unanswered=_sentences(unanswered))


def _sentences(entries: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    return tuple(str(entry.get("sentence") or entry.get("text") or entry.get("quote") or "") for entry in entries)


def _passed(entry: Mapping[str, Any]) -> bool:
    for key in ("verified", "ok", "supported", "passed"):
        if key in entry:
            return bool(entry[key])
    return str(entry.get("status", "ok")).lower() in _PASSED


def _source(value: Any) -> str:
    source = str(value or "").upper()
    return source if source in ("TOOL", "GRAPH", "WEB", "MEMORY") else "KB"


def _float_or_none(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _safe_url(value: Any, source: str = "KB") -> str:
    # Our own pages, and a web passage's http(s) page: a link in the evidence panel must
    # never carry a script URL.
    url = str(value or "")
    if source == "WEB":
        return url if re.match(r"https?://[^\s/]", url, flags=re.IGNORECASE) and not re.search(r"[\s<>\"']", url) else ""
    return url if url.startswith("/") and not url.startswith("//") else ""


def message_evidence(message: Any) -> list[EvidenceItem]:
    """Return the evidence an assistant message was answered from, as stored with it, each
    item opened at the first sentence the answer quoted from it."""
    debug = message.debug if isinstance(message.debug, Mapping) else {}
    stored = debug.get("evidence")
    if not isinstance(stored, list):
        return evidence_items(message.citations)
    texts = {entry.get("n"): str(entry.get("text") or "") for entry in stored if isinstance(entry, Mapping)}
    quotes = _first_quotes(message.citations)
    return [
        at_quote(item, texts.get(item.n, ""), quotes[item.n]) if item.n in quotes else item
        for item in evidence_items(stored)
    ]


def at_quote(item: EvidenceItem, text: str, quote: str) -> EvidenceItem:
    """Show item as a window of text around quote, and link the page at the quote."""
    found = find_quote(text, quote)
    if found is None:
        return item
    start, end = found
    before, after = quote_window(text, start, end)
    quote = text[start:end]
    # A web page is opened at the quote too (a text directive needs the "#").
    url = item.url + "#" if item.source == "WEB" and item.url and "#" not in item.url else item.url
    return replace(item, before=before, quote=quote, after=after, url=_with_text_fragment(url, quote))


def find_quote(text: str, quote: str) -> tuple[int, int] | None:
    """Where quote occurs in text, spacing, case and Markdown marks aside; None if nowhere."""
    words = quote.strip(_EDGES).split()
    if not words or not text:
        return None
    match = re.search(_GAP.join(map(re.escape, words)), text, flags=re.IGNORECASE)
    return match.span() if match else None


def quote_window(text: str, start: int, end: int, *, chars: int = WINDOW_CHARS) -> tuple[str, str]:
    """The text shown before and after text[start:end]: a short lead-in, then the rest of the
    window, each cut at a space and marked "…" where it cuts."""
    lead = max(0, min(LEAD_CHARS, chars - (end - start)))
    from_ = _space_after(text, start - lead) if start > lead else 0
    to = _space_before(text, end + max(0, chars - (end - from_)), end)
    before = ("…" if from_ else "") + text[from_:start]
    after = text[end:to] + ("…" if to < len(text) else "")
    return before, after


def _space_after(text: str, index: int) -> int:
    space = text.find(" ", index)
    return space + 1 if space != -1 else index


def _space_before(text: str, index: int, floor: int) -> int:
    if index >= len(text):
        return len(text)
    space = text.rfind(" ", floor, index)
    return space if space != -1 else index


def _first_quotes(citations: Any) -> dict[int, str]:
    quotes: dict[int, str] = {}
    for citation in citations if isinstance(citations, list) else ():
        if isinstance(citation, Mapping) and citation.get("quote") and str(citation.get("n", "")).isdigit():
            quotes.setdefault(int(citation["n"]), str(citation["quote"]))
    return quotes


def _with_text_fragment(url: str, quote: str) -> str:
    """Add a text directive so the browser scrolls the document's page to the quote itself
    (#chunk-<id> alone stops at the top of a long passage)."""
    words = re.sub(r"[*_`|>#]+", " ", quote).split()
    if not url or "#" not in url or not words:
        return url
    if len(words) <= 2 * _DIRECTIVE_WORDS:
        directive = _directive_part(words)
    else:
        directive = _directive_part(words[:_DIRECTIVE_WORDS]) + "," + _directive_part(words[-_DIRECTIVE_WORDS:])
    return f"{url}:~:text={directive}"


def _directive_part(words: list[str]) -> str:
    # "-", "," and "&" mean something inside a text directive, so they are encoded too.
    return percent_encode(" ".join(words), safe="").replace("-", "%2D")


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
