"""The Planner's Clarifier (Plan-Execute-Report): ask instead of guessing when a question is ambiguous.

Four kinds of ambiguity, found by rules (no model call, a few indexed queries):

- "scope": the question names a document or a chapter ("在 setup.md 里", "第3章", "chapter 2")
  that the KB being searched does not hold, or it chose a KB that holds nothing;
- "kb": no KB was chosen and the router found two (or three) equally likely;
- "pronoun": the question opens with a pronoun (它, 这个, they, this …) and the
  conversation has no earlier turn it could point back to;
- "vague": a first question with no word to search for (the plan's `needs_clarification`).

Each gives at most MAX_CHOICES choices, each a label and what to continue with: the
question (as it was, or with the pronoun or the scope spelled out) and the KB to ask it in.
A reply that picks a choice is marked `clarified`, so the same question is not asked twice.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from agentic_rag.llm.units import has_cjk
from knowledge.analysis import analyze
from knowledge.fusion import expand_query
from knowledge.parsing import SUPPORTED_EXTENSIONS

MAX_CHOICES = 3


@dataclass(frozen=True)
class Choice:
    label: str
    message: str  # the question to continue with
    kb: str = ""  # the KB to ask it in; "" keeps the one the question went to


@dataclass(frozen=True)
class Clarification:
    kind: str  # "scope" | "kb" | "pronoun" | "vague"
    reason: str  # for the trace, in English
    question: str  # what the user is asked, in the question's language
    choices: tuple[Choice, ...] = ()

    def as_event(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason, "question": self.question,
                "choices": [asdict(choice) for choice in self.choices]}


@dataclass(frozen=True)
class KbRef:
    slug: str
    name: str


@dataclass(frozen=True)
class DocRef:
    kb: KbRef
    name: str


class Library(Protocol):
    """What the Clarifier needs to know about the KBs the user may read."""

    def documents(self) -> list[DocRef]: ...  # the ready documents of every readable KB

    def kbs_with_content(self) -> list[KbRef]: ...

    def has_chapter(self, kb: str, number: str) -> bool: ...

    def chapters(self, kb: str) -> list[str]: ...  # top-level chapter titles, in document order

    def subjects(self, kb: str, terms: Sequence[str]) -> list[str]: ...  # sections that hold the terms


@dataclass(frozen=True)
class Asked:
    """The question and where it goes: what the Clarifier reads of a chat run."""

    message: str
    has_history: bool
    kb: KbRef | None  # the KB the question is searched in (chosen or routed)
    kb_chosen: bool  # the user picked it (rather than the router)
    ranked: tuple[tuple[str, float], ...] = ()  # the router's scores, best first, when it routed


# --- scope -------------------------------------------------------------------------------------

# A file of a kind a KB holds ("03-retrieval.md", "方案.pdf"). Another kind ("docker-compose.yaml",
# "config.json") cannot be a document here: it is a file the documents describe, not one missing.
_FILE = re.compile(
    rf"(?i)(?<![\w./-])([\w\u4e00-\u9fff][\w\u4e00-\u9fff.-]{{0,80}}\.(?:{'|'.join(sorted(e.lstrip('.') for e in SUPPORTED_EXTENSIONS))}))\b"
)
# A title in 《》 or quotes is a scope only when the question looks inside it; 《红楼梦》的作者 asks about a book.
_TITLE_INSIDE = re.compile(r"[《「『“\"]([^》」』”\"]{2,80})[》」』”\"]\s*(?:这篇|一文|文档|文件|里面|里|中|document|doc\b|file\b)")
_CHAPTER = re.compile(r"(?i)第\s*([0-9一二三四五六七八九十]{1,3})\s*[章节篇部]|\b(?:chapter|section)\s+(\d{1,3}(?:\.\d{1,3})*)\b")
_CN_DIGITS = {c: i for i, c in enumerate("零一二三四五六七八九十")}


@dataclass(frozen=True)
class ScopeMention:
    kind: str  # "document" | "chapter"
    text: str  # as the question writes it
    name: str  # the document's name, or the chapter's number in digits


def scope_mentions(message: str) -> list[ScopeMention]:
    """The documents and chapters a question names as where to look."""
    found = [ScopeMention("document", m.group(0), m.group(1)) for m in _FILE.finditer(message)]
    found += [ScopeMention("document", m.group(0), m.group(1).strip()) for m in _TITLE_INSIDE.finditer(message)
              if not _FILE.search(m.group(1))]
    for match in _CHAPTER.finditer(message):
        number = match.group(1) or match.group(2)
        found.append(ScopeMention("chapter", match.group(0), _digits(number)))
    return found


def _digits(number: str) -> str:
    if re.fullmatch(r"[\d.]+", number):
        return number
    if number == "十":
        return "10"
    tens, _, ones = number.partition("十")
    if "十" in number:
        return str(_CN_DIGITS.get(tens, 1) * 10 + _CN_DIGITS.get(ones, 0))
    return str(_CN_DIGITS.get(number, 0))


def _holds(doc: DocRef, name: str) -> bool:
    wanted, held = name.lower(), doc.name.lower()
    return wanted == held or wanted in held or _stem(wanted) == _stem(held)


def _stem(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else name


def document_scope(asked: Asked, mention: ScopeMention, library: Library) -> Clarification | None:
    """A named document the searched KB does not hold: the KBs that hold it, or the nearest names."""
    documents = library.documents()
    holding = [doc for doc in documents if _holds(doc, mention.name)]
    if asked.kb is not None and any(doc.kb.slug == asked.kb.slug for doc in holding):
        return None
    language = language_of(asked.message)
    if holding:
        kbs = list({doc.kb.slug: doc.kb for doc in holding}.values())[:MAX_CHOICES]
        choices = tuple(Choice(kb.name, asked.message, kb.slug) for kb in kbs)
        question = _say(language, "scope_elsewhere", name=mention.name)
        return Clarification("scope", f"'{mention.name}' is in {', '.join(k.slug for k in kbs)}, not here", question, choices)
    near = _nearest(mention.name, [doc for doc in documents if asked.kb is None or doc.kb.slug == asked.kb.slug])
    choices = tuple(Choice(doc.name, asked.message.replace(mention.name, doc.name), doc.kb.slug) for doc in near)
    question = _say(language, "scope_missing", name=mention.name)
    return Clarification("scope", f"no readable KB holds a document '{mention.name}'", question, choices)


def _nearest(name: str, documents: Sequence[DocRef]) -> list[DocRef]:
    by_stem = {_stem(doc.name.lower()): doc for doc in documents}
    close = difflib.get_close_matches(_stem(name.lower()), list(by_stem), n=MAX_CHOICES, cutoff=0.5)
    return [by_stem[stem] for stem in close]


def chapter_scope(asked: Asked, mention: ScopeMention, library: Library) -> Clarification | None:
    """A chapter the searched KB does not have: offer the chapters it has."""
    if asked.kb is None or library.has_chapter(asked.kb.slug, mention.name):
        return None
    chapters = library.chapters(asked.kb.slug)[:MAX_CHOICES]
    language = language_of(asked.message)
    choices = tuple(Choice(title, asked.message.replace(mention.text, _quoted(title, language)), asked.kb.slug)
                    for title in chapters)
    question = _say(language, "chapter_missing", name=mention.text.strip(), kb=asked.kb.name)
    return Clarification("scope", f"{asked.kb.slug} has no chapter {mention.name}", question, choices)


def _quoted(title: str, language: str) -> str:
    return f"「{title}」一节" if language == "zh" else f'the section "{title}"'


def empty_scope(asked: Asked, library: Library) -> Clarification | None:
    """A chosen KB that holds no ready document: offer the readable KBs that hold some."""
    if asked.kb is None or not asked.kb_chosen:
        return None
    others = library.kbs_with_content()
    if any(kb.slug == asked.kb.slug for kb in others):
        return None
    choices = tuple(Choice(kb.name, asked.message, kb.slug) for kb in others[:MAX_CHOICES])
    question = _say(language_of(asked.message), "kb_empty", kb=asked.kb.name)
    return Clarification("scope", f"{asked.kb.slug} holds no ready document", question, choices)


# --- two KBs equally likely ----------------------------------------------------------------------


def tied_kbs(ranked: Sequence[tuple[str, float]], *, min_score: float, max_gap: float) -> list[str]:
    """The KBs scoring within `max_gap` of the best one, when at least two pass `min_score`."""
    if len(ranked) < 2 or ranked[0][1] < min_score:
        return []
    best = ranked[0][1]
    tied = [slug for slug, score in ranked[:MAX_CHOICES] if score >= min_score and best - score <= max_gap]
    return tied if len(tied) >= 2 else []


def kb_tie(asked: Asked, names: dict[str, str], *, min_score: float, max_gap: float) -> Clarification | None:
    if asked.kb_chosen:
        return None
    tied = tied_kbs(asked.ranked, min_score=min_score, max_gap=max_gap)
    if not tied:
        return None
    scores = dict(asked.ranked)
    choices = tuple(Choice(names.get(slug, slug), asked.message, slug) for slug in tied)
    reason = "KBs equally likely: " + ", ".join(f"{slug} {scores[slug]:.3f}" for slug in tied)
    return Clarification("kb", reason, _say(language_of(asked.message), "kb_tie"), choices)


# --- a pronoun with nothing before it -----------------------------------------------------------

_LEAD_ZH = r"^\s*(?:请问|那么|那|所以|然后)?\s*(?:为什么|为何|怎么|如何)?\s*"
# 其他/其中/其实 … are not pronouns; 这/那 are only when a verb or a particle follows, not a noun (这个系统).
_PRONOUN_ZH = re.compile(
    _LEAD_ZH + r"(它们|它|他们|她们|他|她|其(?![他它中实余次后间])"
    r"|(?:这个|那个|这些|那些)(?=\s*(?:是|呢|有|能|可以|会|要|该|怎么|为什么|如何|的|在|用|指|叫|啥|什么|多少|么|[?？,，。!！]|$))"
    r"|[这那](?=\s*(?:是|呢|[?？]|$)))"
)
_PRONOUN_EN = re.compile(
    r"(?i)^\s*(?:and |so |but |then |ok,? )?(?:(it|they|them|he|she)\b"
    r"|(this|that|these|those)(?=\s+(?:is|are|was|were|does|do|did|means?|one|ones|can|could|will|would|should|has|have|works?|fails?)\b|['’]s\b|\s*[?.!,]|\s*$))"
)
# "What does it do?", "How does that work?": a short question about nothing but the pronoun.
SHORT_QUESTION_WORDS = 7
_PRONOUN_EN_LATE = re.compile(
    r"(?i)^\s*(?:what|how|why|where|when|who|which)\b[^?]*?\b(it|they|them|this|that|these|those)\b(?:\s+[a-z]+){0,2}\s*[?.!]?\s*$"
)


def dangling_pronoun(message: str, *, has_history: bool) -> str:
    """The pronoun a first question opens with (it points at nothing); "" when there is none."""
    if has_history:
        return ""
    is_short = len(message.split()) <= SHORT_QUESTION_WORDS
    for pattern in (_PRONOUN_ZH, _PRONOUN_EN, _PRONOUN_EN_LATE if is_short else None):
        match = pattern.search(message) if pattern else None
        if match:
            return next(group for group in match.groups() if group)
    return ""


def pronoun(asked: Asked, library: Library) -> Clarification | None:
    word = dangling_pronoun(asked.message, has_history=asked.has_history)
    if not word:
        return None
    choices: tuple[Choice, ...] = ()
    if asked.kb is not None:
        # The cross-language variants too: a Chinese question about English documents (它的权重 → weight).
        terms = [t for variant in expand_query(asked.message) for t in analyze(variant) if t.lower() != word.lower()]
        subjects = library.subjects(asked.kb.slug, terms) or library.chapters(asked.kb.slug)
        choices = tuple(Choice(subject, _spell_out(asked.message, word, subject), asked.kb.slug)
                        for subject in subjects[:MAX_CHOICES])
    question = _say(language_of(asked.message), "pronoun", word=word)
    return Clarification("pronoun", f"'{word}' opens the conversation's first question", question, choices)


def _spell_out(message: str, word: str, subject: str) -> str:
    """The question with its pronoun replaced by the subject it may mean."""
    if re.fullmatch(r"[A-Za-z]+", word):
        return re.sub(rf"(?i)\b{re.escape(word)}\b", subject, message, count=1)
    return message.replace(word, f"{subject} ", 1).replace("  ", " ")


def vague(asked: Asked, library: Library) -> Clarification | None:
    """A first question with no word to search for ("是什么？"): the plan would have no task to run."""
    if asked.has_history or asked.kb is None or analyze(asked.message):
        return None
    language = language_of(asked.message)
    ask = "{} 是什么？" if language == "zh" else "What is {}?"
    choices = tuple(Choice(title, ask.format(title), asked.kb.slug) for title in library.chapters(asked.kb.slug)[:MAX_CHOICES])
    return Clarification("vague", "the question has no word to search for", _say(language, "vague"), choices)


# --- the Clarifier -------------------------------------------------------------------------------


def clarify(asked: Asked, library: Library, *, min_score: float, max_gap: float) -> Clarification | None:
    """The first ambiguity of the question that leaves the search guessing, or None."""
    for mention in scope_mentions(asked.message):
        check = document_scope if mention.kind == "document" else chapter_scope
        found = check(asked, mention, library)
        if found is not None:
            return found
    found = empty_scope(asked, library)
    if found is None and not asked.kb_chosen and len(asked.ranked) > 1:
        names = {kb.slug: kb.name for kb in library.kbs_with_content()}
        found = kb_tie(asked, names, min_score=min_score, max_gap=max_gap)
    return found or pronoun(asked, library) or vague(asked, library)


_TEXTS = {
    "scope_elsewhere": {
        "en": "“{name}” is not in this knowledge base. Which knowledge base should I search?",
        "zh": "当前知识库里没有“{name}”。要在哪个知识库里查找？",
    },
    "scope_missing": {
        "en": "None of your knowledge bases holds a document named “{name}”. Which document do you mean?",
        "zh": "你能访问的知识库里都没有名为“{name}”的文档。你指的是哪一篇？",
    },
    "chapter_missing": {
        "en": "The knowledge base “{kb}” has no “{name}”. Which part do you mean?",
        "zh": "知识库「{kb}」里没有“{name}”。你指的是哪一部分？",
    },
    "kb_empty": {
        "en": "The knowledge base “{kb}” holds no documents yet. Where should I search instead?",
        "zh": "知识库「{kb}」里还没有可用的文档。要改在哪个知识库里查找？",
    },
    "kb_tie": {
        "en": "This question fits more than one of your knowledge bases equally well. Which one do you mean?",
        "zh": "这个问题和你的几个知识库都同样相关。你想问的是哪一个？",
    },
    "vague": {
        "en": "What would you like to know? Pick a topic, or ask again in a few more words.",
        "zh": "你想了解什么？请选一个主题，或者多写几个字再问一次。",
    },
    "pronoun": {
        "en": "What does “{word}” refer to? Pick one, or ask again naming it.",
        "zh": "“{word}”指的是什么？请选一个，或者写明后再问一次。",
    },
}


def language_of(text: str) -> str:
    """The language the question is asked in, which its clarifying question is asked in too."""
    return "zh" if has_cjk(text) else "en"


def _say(language: str, key: str, **values: str) -> str:
    return _TEXTS[key][language].format(**values)
