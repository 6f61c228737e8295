"""The Clarifier's look-ups over the knowledge bases one user may read (its `Library`)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from django.db.models import F, Q

from knowledge.models import Chunk, Document, KnowledgeBase

from .clarifier import DocRef, KbRef

MAX_DOCUMENTS = 5000  # names compared with a named document; more is a KB nobody names by file
SUBJECT_ROWS = 200
MAX_TERMS = 4  # terms tried for a pronoun's subjects, one indexed query each
_NUMBERING = re.compile(r"^\s*(?:第\s*[0-9一二三四五六七八九十]+\s*[章节篇部]|\d+(?:\.\d+)*\.?)\s*")


class ReadableLibrary:
    """Documents, chapters and sections of the KBs `user` may read, and nothing of the others."""

    def __init__(self, user: Any) -> None:
        self.kbs = KnowledgeBase.objects.readable_by(user)

    def _live_chunks(self, kb: str):
        return Chunk.objects.filter(kb__in=self.kbs, kb__slug=kb, version=F("document__live_version"))

    def documents(self) -> list[DocRef]:
        rows = (Document.objects.filter(kb__in=self.kbs, live_version__gt=0)
                .order_by("kb__slug", "name").values_list("kb__slug", "kb__name", "name")[:MAX_DOCUMENTS])
        return [DocRef(KbRef(slug, kb_name), name) for slug, kb_name, name in rows]

    def kbs_with_content(self) -> list[KbRef]:
        holding = Document.objects.filter(kb__in=self.kbs, live_version__gt=0).values("kb_id")
        return [KbRef(slug, name) for slug, name in
                KnowledgeBase.objects.filter(pk__in=holding).order_by("slug").values_list("slug", "name")]

    def has_chapter(self, kb: str, number: str) -> bool:
        chapter = Q(section_index=number) | Q(section_index__startswith=f"{number}.")
        for field in ("chapter_level_1", "chapter_level_2", "section_title"):
            chapter |= Q(**{f"{field}__startswith": f"{number} "}) | Q(**{f"{field}__startswith": f"{number}."})
            chapter |= Q(**{f"{field}__icontains": f"chapter {number}"}) | Q(**{f"{field}__contains": f"第{number}章"})
        return self._live_chunks(kb).filter(chapter).exists()

    def chapters(self, kb: str) -> list[str]:
        rows = (self._live_chunks(kb).exclude(chapter_level_1="")
                .order_by("document__name", "index").values_list("chapter_level_1", flat=True)[:SUBJECT_ROWS])
        return _distinct(_title(row) for row in rows)

    def subjects(self, kb: str, terms: Sequence[str]) -> list[str]:
        """The sections whose text holds one of the terms (the longest that any holds), most passages first."""
        for term in sorted(set(terms), key=len, reverse=True)[:MAX_TERMS]:
            rows = (self._live_chunks(kb).filter(level=Chunk.CHILD, text__icontains=term)
                    .values_list("chapter_level_2", "chapter_level_1", "section_title")[:SUBJECT_ROWS])
            counts = Counter(_title(next((part for part in row if part), "")) for row in rows)
            counts.pop("", None)
            if counts:
                return [title for title, _ in counts.most_common()]
        return []


def _title(heading: str) -> str:
    """A heading without its numbering: "1.1 Weights" → "Weights"."""
    return _NUMBERING.sub("", heading).strip() or heading.strip()


def _distinct(titles) -> list[str]:
    return list(dict.fromkeys(title for title in titles if title))
