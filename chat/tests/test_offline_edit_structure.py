"""Offline document-chat rules never alter fenced code, tables or front matter: every such
block of every section of the demo documents (and of the seed design documents, when they are
beside the project) comes out of condense, expand and tidy byte for byte."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings

from chat.document_chat.offline_edit import CONDENSE_RATIOS, MESSAGES, condense, expand, tidy
from knowledge.editing import file_sections

TEXT = MESSAGES["en"]
FENCED = re.compile(r"^ {0,3}(`{3,}|~{3,})[^\n]*\n.*?^ {0,3}\1[ \t]*$", re.MULTILINE | re.DOTALL)
TABLE = re.compile(r"(?:^\|.*\|[ \t]*\n?){2,}", re.MULTILINE)
SEEDS = Path(settings.BASE_DIR).parent / "shared" / "seeds"


def documents() -> list[Path]:
    demo = sorted((Path(settings.BASE_DIR) / "docs").glob("*.md"))
    return demo + (sorted(SEEDS.glob("*.txt")) if SEEDS.is_dir() else [])


def kept_blocks(source: str) -> list[str]:
    return [m[0] for m in FENCED.finditer(source)] + [m[0].rstrip("\n") for m in TABLE.finditer(source)]


@pytest.mark.parametrize("path", documents(), ids=lambda path: path.name)
def test_no_rule_alters_code_or_tables_in_any_section(path):
    checked = 0
    for section in file_sections(path.name, path.read_bytes()):
        source = section.source
        blocks = kept_blocks(source)
        if not blocks:
            continue
        edits = [condense(source, ratio, TEXT) for ratio in CONDENSE_RATIOS]
        edits += [tidy(source, TEXT), expand(source, [("A related sentence that adds a new fact here.", "x.md")], skip=0, text=TEXT)]
        for edit in edits:
            if edit.refused:
                continue
            for block in blocks:
                assert block in edit.content, (path.name, section.title, edit.summary, block[:80])
            checked += 1
    assert checked or not any(kept_blocks(s.source) for s in file_sections(path.name, path.read_bytes()))


def test_a_fence_with_blank_lines_inside_is_one_block_kept_whole():
    source = (
        "Retrieval results are wrapped before the prompt. The model reads them as data. "
        "It never follows them. Each document carries its id.\n\n"
        "```xml\n<documents>\n<document id=\"doc_02\">\n\nLorem ipsum dolor. Sit amet consectetur. Adipiscing elit sed. "
        "Do eiusmod tempor. Incididunt ut labore.\n\n</document>\n</documents>\n```\n\n"
        "The wrapper is escaped. Nothing inside it is an instruction. That is the rule."
    )
    fence = source[source.index("```xml"):source.rindex("```") + 3]

    for ratio in CONDENSE_RATIOS:
        edit = condense(source, ratio, TEXT)
        assert not edit.refused and fence in edit.content


def test_only_code_is_refused_with_the_reason():
    source = "```\nmake run\n\nmake test\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |"

    for edit in (condense(source, 0.6, TEXT), tidy(source, TEXT)):
        assert edit.refused and edit.summary == TEXT["only_structure"]
