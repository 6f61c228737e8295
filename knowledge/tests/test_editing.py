"""Section editing: bodies as written, replacing one, accepting an edit as a new version."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from django.test import TestCase

from knowledge.editing import (
    EditConflict,
    NotEditable,
    SectionEditError,
    SectionNotFound,
    accept_section_edit,
    document_sections,
    file_sections,
    is_editable,
    replace_section,
)
from knowledge.ingest import restore_version, run_ingestion
from knowledge.models import Chunk, Document, DocumentVersion
from knowledge.parsing import parse_document
from knowledge.retrieval import RetrievalParams, retrieve

from .test_ingest import _ingest

HANDBOOK_MD = """---
title: Site handbook
tags: [ops, safety]
---

# Site Handbook

This handbook collects the **rules** every crew follows on site.

## 1 Setup

Install the tools with the [installer](https://example.com/install).

```bash
# not a heading: a shell comment
## nor this
make install
```

After the install, run the checks.

## 2 Materials ##

| Material | Standard |
| --- | --- |
| Concrete | GB 50204-2015 |
| Steel | GB 50205-2020 |

> Keep every delivery receipt.

Storage rules
-------------

Keep cement dry. Stack bars on timber.

- first item
- second item

Inspection
==========

~~~
# a tilde fence is code too
~~~

Inspectors sign the log daily.
### 3.1 Last words
Short and final.
"""
PREAMBLE_MD = "Draft notes written before any heading.\n\n# Alpha\n\nAlpha body.\n\n# Beta\n"
CHINESE_TXT = """混凝土结构施工方案

第一章 总则

本方案适用于某项目主体结构施工。

1.1 编制依据

《混凝土结构工程施工质量验收规范》GB 50204-2015。

1.2 工程概况

本工程地上十八层，地下两层，框架剪力墙结构。

第二章 施工准备

2.1 技术准备

施工前应完成图纸会审和技术交底。
"""
PLAIN_TXT = "Just a note without headings.\n\nIt has a second paragraph.\n"


def _variants() -> list[tuple[str, str, bytes]]:
    handbook = HANDBOOK_MD.encode()
    return [
        ("handbook", "handbook.md", handbook),
        ("crlf", "handbook.md", handbook.replace(b"\n", b"\r\n")),
        ("bom", "handbook.markdown", b"\xef\xbb\xbf" + handbook),
        ("no-final-newline", "handbook.md", handbook.rstrip(b"\n")),
        ("preamble", "notes.md", PREAMBLE_MD.encode()),
        ("heading-at-eof", "notes.md", PREAMBLE_MD.rstrip("\n").encode()),
        ("chinese", "方案.txt", CHINESE_TXT.encode()),
        ("gb18030", "方案.txt", CHINESE_TXT.encode("gb18030")),
        ("plain", "note.txt", PLAIN_TXT.encode()),
    ]


DOCS = sorted((Path(__file__).resolve().parents[2] / "docs").glob("*.md"))  # the demo knowledge base
FILES = [pytest.param(name, data, id=case) for case, name, data in _variants()] + [
    pytest.param(path.name, path.read_bytes(), id=f"docs/{path.name}") for path in DOCS
]


def _sources(name: str, data: bytes) -> list[str]:
    return [section.source for section in file_sections(name, data)]


def _parsed(name: str, data: bytes):
    return parse_document(name, data).sections


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _changed_bytes(before: bytes, after: bytes) -> int:
    """How many bytes of `before` differ: what is left after the common prefix and suffix."""
    shorter = min(len(before), len(after))
    prefix = next((i for i in range(shorter) if before[i] != after[i]), shorter)
    limit = shorter - prefix
    suffix = next((i for i in range(limit) if before[-1 - i] != after[-1 - i]), limit)
    return len(before) - prefix - suffix


# --- replacing a section's body -----------------------------------------------------------


def test_the_demo_docs_are_checked():
    assert len(DOCS) >= 10


@pytest.mark.parametrize(("name", "data"), FILES)
def test_it_gives_back_the_same_bytes_for_each_section_body_unchanged(name, data):
    sources = _sources(name, data)

    assert len(sources) == len(_parsed(name, data)) > 0
    for position, source in enumerate(sources):
        assert replace_section(name, data, position, source)[0] == data


@pytest.mark.parametrize(("name", "data"), FILES)
def test_it_changes_only_the_section_it_replaces(name, data):
    before = _parsed(name, data)
    sources = _sources(name, data)

    for position in range(len(before)):
        new_body = f"Rewritten paragraph number {position}, with **bold** words.\nA second line."
        new_data = replace_section(name, data, position, new_body)[0]

        after = _parsed(name, new_data)
        assert after[position].text == (new_body if name.endswith(".txt") else new_body.replace("**", ""))
        assert [s for i, s in enumerate(after) if i != position] == [s for i, s in enumerate(before) if i != position]
        assert dataclasses.replace(after[position], text="") == dataclasses.replace(before[position], text="")
        if _is_utf8(data):  # other encodings are written back as UTF-8, every byte changed
            assert _changed_bytes(data, new_data) <= len(sources[position].encode())


def test_it_keeps_markdown_and_leaves_out_headings_and_front_matter():
    sources = _sources("handbook.md", HANDBOOK_MD.encode())
    titles = [s.title for s in _parsed("handbook.md", HANDBOOK_MD.encode())]

    assert titles == ["Site Handbook", "Setup", "Materials", "Storage rules", "Inspection", "Last words"]
    assert sources[0] == "This handbook collects the **rules** every crew follows on site."
    assert sources[1].startswith("Install the tools with the [installer](https://example.com/install).\n\n```bash\n")
    assert "## nor this" in sources[1] and sources[1].endswith("After the install, run the checks.")
    assert sources[2].startswith("| Material | Standard |\n| --- | --- |") and "> Keep" in sources[2]
    assert sources[3].startswith("Keep cement dry.") and "----" not in sources[3]
    assert sources[4].endswith("Inspectors sign the log daily.") and "====" not in sources[4]
    assert sources[5] == "Short and final."
    assert not any("title: Site handbook" in source for source in sources)


def test_it_keeps_a_blank_line_before_the_next_heading():
    data = HANDBOOK_MD.encode()

    new_data = replace_section("handbook.md", data, 4, "~~~\ncode\n~~~\n\nA new last paragraph.")[0]

    assert b"A new last paragraph.\n\n### 3.1 Last words\nShort and final.\n" in new_data
    assert new_data.startswith(data[: data.index(b"~~~")])


def test_it_writes_new_lines_with_the_file_s_line_breaks():
    data = HANDBOOK_MD.encode().replace(b"\n", b"\r\n")

    new_data = replace_section("handbook.md", data, 1, "One line.\nAnother line.\n\n")[0]

    assert b"## 1 Setup\r\n\r\nOne line.\r\nAnother line.\r\n\r\n## 2 Materials" in new_data
    assert b"\n" not in new_data.replace(b"\r\n", b"")


def test_it_writes_a_legacy_encoded_file_back_as_utf8():
    data = CHINESE_TXT.encode("gb18030")

    new_data = replace_section("方案.txt", data, 3, "本工程地上二十层。")[0]

    assert new_data == CHINESE_TXT.replace("本工程地上十八层，地下两层，框架剪力墙结构。", "本工程地上二十层。").encode()


def test_it_gives_an_empty_section_a_body():
    sections = _parsed("方案.txt", CHINESE_TXT.encode())
    assert (sections[4].title, sections[4].text) == ("施工准备", "第二章 施工准备")

    new_data = replace_section("方案.txt", CHINESE_TXT.encode(), 4, "本章规定施工前的准备工作。")[0]

    assert "第二章 施工准备\n\n本章规定施工前的准备工作。\n\n2.1 技术准备" in new_data.decode()
    assert _parsed("方案.txt", new_data)[4].text == "本章规定施工前的准备工作。"


@pytest.mark.parametrize(
    "new_body",
    [
        "New text.\n\n## A heading smuggled in\n\nMore text.",
        "New text.\n\n```python\nprint('a fence left open')",
        "New text.\nUnderlined as a heading\n---",
    ],
)
def test_it_refuses_a_body_that_would_change_other_sections(new_body):
    with pytest.raises(SectionEditError, match="other sections"):
        replace_section("handbook.md", HANDBOOK_MD.encode(), 1, new_body)


@pytest.mark.parametrize(
    ("name", "kind"), [("report.pdf", "PDF"), ("report.docx", "Word"), ("page.html", "HTML"), ("page.htm", "HTML")]
)
def test_it_refuses_formats_it_cannot_write_back(name, kind):
    with pytest.raises(NotEditable, match=f"^{kind} documents can be asked about but not rewritten in place"):
        replace_section(name, b"<h1>x</h1>", 0, "new")


@pytest.mark.parametrize("position", [-1, 6, 100])
def test_it_reports_a_section_that_does_not_exist(position):
    with pytest.raises(SectionNotFound, match="has 6"):
        replace_section("handbook.md", HANDBOOK_MD.encode(), position, "new")


# --- documents in the database ------------------------------------------------------------


def _accept(document, position, new_body, **options):
    queued: list[int] = []
    options.setdefault("base_sha256", document.sha256)
    with TestCase.captureOnCommitCallbacks(execute=True):
        outcome = accept_section_edit(document, position, new_body, user=None, enqueue=queued.append, **options)
    for document_id in queued:
        run_ingestion(document_id)
    return outcome


def _restore(document, version, user=None):
    queued: list[int] = []
    with TestCase.captureOnCommitCallbacks(execute=True):
        outcome = restore_version(document, version, user=user, enqueue=queued.append)
    for document_id in queued:
        run_ingestion(document_id)
    return outcome


def _found(kb, query: str) -> list[str]:
    return [c.text for c in retrieve(query, kb, RetrievalParams(mode="hybrid")).candidates]


@pytest.mark.django_db
def test_it_lists_the_sections_of_a_document_with_their_sources(kb):
    markdown = _ingest(kb, "handbook.md", HANDBOOK_MD.encode()).document
    html = _ingest(kb, "page.html", b"<h1>Guide</h1><p>First.</p><h2>Setup</h2><p>Set it up.</p>").document

    sections = document_sections(markdown)
    pages = document_sections(html)

    assert is_editable(markdown) and not is_editable(html)
    assert [s.position for s in sections] == list(range(6))
    assert (sections[1].index, sections[1].title, sections[1].level, sections[1].chapter_level_2) == ("1.1", "Setup", 2, "Setup")
    assert "```bash" in sections[1].source and "```" not in sections[1].text
    assert [s.title for s in pages] == ["Guide", "Setup"] and {s.source for s in pages} == {""}


@pytest.mark.django_db
def test_an_accepted_edit_becomes_a_new_version_that_search_finds_and_restore_undoes(kb, alice):
    document = _ingest(kb, "handbook.md", HANDBOOK_MD.encode()).document
    original = bytes(document.file.data)

    outcome = _accept(document, 3, "Store cement on pallets under a zeppelin-proof tarpaulin.")

    document.refresh_from_db()
    assert outcome.status == "queued" and document.version == document.live_version == 2
    assert any("zeppelin" in text for text in _found(kb, "zeppelin tarpaulin pallets"))
    assert list(document.versions.values_list("version", "note")) == [
        (2, "edited section 1.3 Storage rules"),
        (1, ""),
    ]
    assert bytes(document.versions.get(version=1).data) == original

    restored = _restore(document, 1, user=alice)

    document.refresh_from_db()
    assert restored.status == "queued" and document.version == document.live_version == 3
    assert bytes(document.file.data) == original
    kept = document.versions.get(version=3)
    assert (kept.note, kept.created_by, bytes(kept.data)) == ("restored from version 1", alice, original)
    live = " ".join(Chunk.objects.live().filter(document=document).values_list("text", flat=True))
    assert "Keep cement dry." in live and "zeppelin" not in live


@pytest.mark.django_db
def test_it_refuses_an_edit_proposed_against_an_older_version(kb):
    document = _ingest(kb, "handbook.md", HANDBOOK_MD.encode()).document
    stale = document.sha256
    _accept(document, 1, "Someone else rewrote this first.")
    document.refresh_from_db()

    with pytest.raises(EditConflict, match="changed since"):
        _accept(document, 2, "A rewrite of the old text.", base_sha256=stale)

    document.refresh_from_db()
    assert document.version == 2 and document.versions.count() == 2
    assert b"Someone else" in bytes(document.file.data)


@pytest.mark.django_db
def test_it_refuses_an_oversize_or_unchanged_body_and_writes_nothing(kb, settings):
    settings.MAX_SECTION_EDIT_CHARS = 50
    document = _ingest(kb, "handbook.md", HANDBOOK_MD.encode()).document

    with pytest.raises(SectionEditError, match="51 characters, over the limit of 50"):
        _accept(document, 1, "x" * 51)
    with pytest.raises(SectionEditError, match="same as the section's current text"):
        _accept(document, 5, "\nShort and final.\n\n")
    with pytest.raises(SectionNotFound):
        _accept(document, 6, "Nothing to replace.")

    document.refresh_from_db()
    assert document.version == 1 and DocumentVersion.objects.count() == 1


@pytest.mark.django_db
def test_it_refuses_to_rewrite_a_pdf(kb):
    document = Document.objects.create(kb=kb, name="report.pdf", sha256="a" * 64)

    with pytest.raises(NotEditable, match="PDF documents can be asked about but not rewritten in place"):
        _accept(document, 0, "New text.")
    assert not is_editable(document) and document_sections(document) == []
