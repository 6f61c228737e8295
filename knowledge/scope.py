"""The scope a question names: a document ("in 03-retrieval.md", "《检索引擎》文档里"), a chapter
or section ("第3章", "section 7.6", "7.6 质量门控"), or both.

The quality gate rejects the candidates outside a named scope (S2 §7.6, "项目范围匹配"), and
retrieval ranks the candidates inside it first, so the gate has some to accept. A scope is
only named when the KB holds it: a section number the KB has no section for, or a title with
no cue that it names a document ("the retrieval engine" in a question about retrieval), names
nothing, and the question searches the whole KB as before.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from .candidates import Candidate

_CN_DIGITS = {"零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_NUMBER = r"\d+(?:\.\d+)*"
# 第3章 / 第三节 / 第 7.6 节; chapter 3, section 7.6, sect. 2, §7.6; 7.6 节, 3章, 章节 7.6
_CHAPTER_CUES = (
    re.compile(r"第\s*([0-9一二三四五六七八九十两]+(?:\.\d+)*)\s*[章节部篇]"),
    re.compile(rf"(?:\bsections?|\bchapters?|\bsect\.|\bchap\.|§)\s*({_NUMBER})\b", re.I),
    re.compile(rf"(?<![\d.])({_NUMBER})\s*(?:章|节|小节)"),
    re.compile(rf"(?:章节|小节)\s*({_NUMBER})(?![\d.])"),
)
# "7.6 质量门控": a dotted number followed by words, a section only when the KB has a section
# of that number whose title starts with those words.
_NUMBER_AND_TITLE = re.compile(rf"(?<![\w.])(\d+(?:\.\d+)+)\s*([^\s\d，。？！?!,;；:：、]{{2,}})")
# Words that say a title in the question names a document.
_DOCUMENT_CUES = re.compile(r"文档|文件|这篇|那篇|指南|手册|\bdoc(?:ument)?s?\b|\bfile\b|\bpage\b|\bguide\b|\bmanual\b", re.I)
_QUOTED = re.compile(r"《([^》]{2,})》|“([^”]{2,})”|\"([^\"]{2,})\"|「([^」]{2,})」|'([^']{3,})'")
_CUE_WINDOW = 12  # characters between a title and the cue word that makes it a document's
MIN_TITLE_CHARS = 4


@dataclass(frozen=True)
class DocumentName:
    """What a question may call a document by: its file name and its title."""

    doc_id: int
    name: str
    title: str = ""


@dataclass(frozen=True)
class Section:
    doc_id: int
    index: str  # "7.6"
    title: str = ""


@dataclass(frozen=True)
class Scope:
    """Documents and/or a chapter a question confines itself to."""

    doc_ids: frozenset[int] = frozenset()
    doc_names: tuple[str, ...] = ()
    chapter: str = ""  # a section number: "3" holds 3, 3.1, 3.1.2 …
    source: str = "question"  # "question", or "ui" when a control chose it

    def __bool__(self) -> bool:
        return bool(self.doc_ids or self.chapter)

    @property
    def label(self) -> str:
        parts = [", ".join(self.doc_names)] if self.doc_names else []
        if self.chapter:
            parts.append(f"§{self.chapter}")
        return " ".join(parts)

    def rejection(self, candidate: Candidate) -> str | None:
        """Why the candidate is outside this scope, or None when it is inside."""
        if self.doc_ids and candidate.doc_id not in self.doc_ids:
            return f"outside the scope {self.label}: from {candidate.doc_name}"
        if self.chapter and not in_chapter(candidate.section_index, self.chapter):
            where = f"§{candidate.section_index}" if candidate.section_index else "no numbered section"
            return f"outside the scope {self.label}: {where}"
        return None


def in_chapter(section_index: str, chapter: str) -> bool:
    """Whether a section number lies in a chapter: 7.6 and 7.6.1 are in 7.6, 7.60 is not."""
    return section_index == chapter or section_index.startswith(chapter + ".")


def detect_scope(
    question: str, documents: Sequence[DocumentName], sections: Iterable[Section] | None = None
) -> Scope | None:
    """The scope the question names among the KB's documents and sections, or None.

    `sections` may be None when the question has no chapter cue (`names_chapter`), to spare
    loading them.
    """
    named = _named_documents(question, documents)
    doc_ids = frozenset(d.doc_id for d in named)
    chapter = _named_chapter(question, [s for s in sections or () if not doc_ids or s.doc_id in doc_ids])
    scope = Scope(doc_ids, tuple(d.name for d in named), chapter)
    return scope if scope else None


def names_chapter(question: str) -> bool:
    """Whether the question may name a chapter (then the KB's sections are worth loading)."""
    return any(p.search(question) for p in (*_CHAPTER_CUES, _NUMBER_AND_TITLE))


def _named_documents(question: str, documents: Sequence[DocumentName]) -> list[DocumentName]:
    lowered = question.lower()
    quoted = {next(g for g in m.groups() if g).strip().lower() for m in _QUOTED.finditer(question)}
    return [d for d in documents if _names_document(lowered, quoted, d)]


def _names_document(lowered: str, quoted: set[str], document: DocumentName) -> bool:
    name = document.name.lower()
    if _mentions(lowered, name):
        return True
    stem = _stem(document.name)
    # A stem alone ("03-retrieval", "quality_gate") is a file's name when it does not read as
    # words; "readme" or "faq" alone are words too, and need a cue.
    looks_like_file = bool(re.search(r"[-_\d]", stem)) and len(stem) >= MIN_TITLE_CHARS
    if looks_like_file and _mentions(lowered, stem):
        return True
    for title in {stem, document.title.strip().lower()}:
        if len(title) >= MIN_TITLE_CHARS and (title in quoted or _cued(lowered, title)):
            return True
    return False


def _stem(name: str) -> str:
    return PurePosixPath(name).stem.lower()


def _mentions(lowered: str, text: str) -> bool:
    """`text` occurs in the question and is not part of a longer word or name."""
    if not text:
        return False
    pattern = rf"(?<![\w.-]){re.escape(text)}(?![\w-]|\.\w)"
    return re.search(pattern, lowered) is not None


def _cued(lowered: str, title: str) -> bool:
    for match in re.finditer(rf"(?<!\w){re.escape(title)}(?!\w)", lowered):
        around = lowered[max(0, match.start() - _CUE_WINDOW): match.end() + _CUE_WINDOW]
        if _DOCUMENT_CUES.search(around):
            return True
    return False


def _named_chapter(question: str, sections: Sequence[Section]) -> str:
    if not sections:
        return ""
    indexes = {s.index for s in sections if s.index}
    for pattern in _CHAPTER_CUES:
        for match in pattern.finditer(question):
            number = _arabic(match.group(1))
            if number and any(in_chapter(index, number) for index in indexes):
                return number
    for match in _NUMBER_AND_TITLE.finditer(question):
        number, words = match.group(1), match.group(2).lower()
        if any(s.index == number and s.title and _starts_alike(s.title.lower(), words) for s in sections):
            return number
    return ""


def _starts_alike(title: str, words: str) -> bool:
    return title.startswith(words) or words.startswith(title)


def _arabic(number: str) -> str:
    """'3' → '3', '7.6' → '7.6', '三' → '3', '十二' → '12', '二十' → '20'."""
    if re.fullmatch(_NUMBER, number):
        return number
    if not re.fullmatch(r"[零一二三四五六七八九十两]+", number):
        return ""
    if "十" not in number:
        return "".join(str(_CN_DIGITS[c]) for c in number)
    tens, _, ones = number.partition("十")
    value = (_CN_DIGITS.get(tens, 1) if tens else 1) * 10 + (_CN_DIGITS.get(ones, 0) if ones else 0)
    return str(value)


def in_scope_first(candidates: Sequence[Candidate], scope: Scope | None) -> list[Candidate]:
    """The candidates inside the scope, then the others, each group in its order."""
    if not scope:
        return list(candidates)
    inside = [c for c in candidates if scope.rejection(c) is None]
    return inside + [c for c in candidates if scope.rejection(c) is not None]


# --- what the KB holds -----------------------------------------------------------------------


_DOCUMENT_CACHE: dict[tuple, list[DocumentName]] = {}
_DOCUMENT_CACHE_SIZE = 64
_DOCUMENT_CACHE_LOCK = threading.Lock()


def kb_documents(kb) -> list[DocumentName]:
    """The KB's ready documents by file name and title, cached while none of them changes.

    Every gated search asks; a KB of thousands of documents would load all their names each
    time, while one aggregate says whether any was added, removed or changed.
    """
    from django.db.models import Count, Max

    from .models import Document, DocumentStatus

    ready = Document.objects.filter(kb=kb, status=DocumentStatus.READY)
    state = ready.aggregate(count=Count("pk"), last=Max("pk"), changed=Max("updated_at"))
    key = (kb.pk, state["count"], state["last"], state["changed"])
    with _DOCUMENT_CACHE_LOCK:
        cached = _DOCUMENT_CACHE.get(key)
    if cached is not None:
        return cached
    rows = ready.values_list("pk", "name", "metadata")
    documents = [DocumentName(pk, name, str((metadata or {}).get("title") or "")) for pk, name, metadata in rows]
    with _DOCUMENT_CACHE_LOCK:
        if len(_DOCUMENT_CACHE) >= _DOCUMENT_CACHE_SIZE:
            _DOCUMENT_CACHE.pop(next(iter(_DOCUMENT_CACHE)))
        _DOCUMENT_CACHE[key] = documents
    return documents


def kb_sections(kb) -> list[Section]:
    """The numbered sections of the KB's live child chunks."""
    from .models import Chunk

    rows = (
        Chunk.objects.filter(kb=kb, level=Chunk.CHILD).live().exclude(section_index="")
        .values_list("document_id", "section_index", "section_title").distinct()
    )
    return [Section(doc_id, index, title) for doc_id, index, title in rows]


def scope_of_question(question: str, kb) -> Scope | None:
    """Detect the scope a question names in a KB (the sections load only on a chapter cue)."""
    documents = kb_documents(kb)
    sections = kb_sections(kb) if names_chapter(question) else None
    return detect_scope(question, documents, sections)


def chapter_chunk_ids(kb, scope: Scope, limit: int) -> list[int]:
    """The first `limit` live child chunks of the scope's chapter, in reading order.

    "What does section 6 say?" holds few words a passage of section 6 shares: the chapter
    itself is what it asks for, so its chunks join the candidates (as the "scope" source).
    """
    from django.db.models import Q

    from .models import Chunk

    if not scope.chapter:
        return []
    rows = Chunk.objects.filter(kb=kb, level=Chunk.CHILD).live().filter(
        Q(section_index=scope.chapter) | Q(section_index__startswith=scope.chapter + ".")
    )
    if scope.doc_ids:
        rows = rows.filter(document_id__in=scope.doc_ids)
    return list(rows.order_by("document_id", "index").values_list("pk", flat=True)[:limit])
