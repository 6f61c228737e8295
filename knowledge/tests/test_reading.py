"""The document as read: blocks of a passage, and children's passages cut from their parent."""

from __future__ import annotations

from knowledge.models import Chunk
from knowledge.reading import OutlineItem, _pieces, page_numbers, readable_sections, text_blocks, visible_outline


def test_it_reads_paragraphs_lists_tables_and_code():
    text = "Intro line one\nline two\n\n- first\n- second\n\npath | weight\n--- | ---\nparent | 1.0\ntag | 1.2\n\n```\nmake run\n```"

    blocks = text_blocks(text)

    assert [b.kind for b in blocks] == ["paragraph", "list", "table", "code"]
    assert blocks[0].lines == ("Intro line one", "line two")
    assert blocks[1].lines == ("first", "second")
    assert blocks[2].rows == (("path", "weight"), ("parent", "1.0"), ("tag", "1.2"))
    assert blocks[3].lines == ("make run",)


def test_overlapping_children_share_no_text_and_a_lost_child_still_has_its_anchor():
    text = "One. Two. Three. Four."
    children = [Chunk(pk=1, text="One. Two."), Chunk(pk=2, text="Two. Three."), Chunk(pk=3, text="not in the text"),
                Chunk(pk=4, text="Four.")]

    pieces = _pieces(text, children)

    assert pieces == [(1, "One. Two."), (2, " Three."), (3, ""), (4, "Four.")]


def test_a_section_does_not_repeat_its_heading_as_text(kb):
    from knowledge.models import Document

    document = Document.objects.create(kb=kb, name="a.md", sha256="0" * 64, size=1)
    parent = Chunk.objects.create(kb=kb, document=document, version=1, level=Chunk.PARENT, index=0,
                                  text="2.1 Tokenisation\nChinese text is cut by jieba.", section_index="2.1",
                                  section_title="Tokenisation", chapter_level_1="Keyword leg", sha256="x")
    Chunk.objects.create(kb=kb, document=document, version=1, level=Chunk.CHILD, index=0, parent=parent,
                         text="Chinese text is cut by jieba.", section_title="Tokenisation", sha256="y")

    [section] = readable_sections(Chunk.objects.filter(pk=parent.pk).prefetch_related("children"))

    assert (section.index, section.title, section.level) == ("2.1", "Tokenisation", 2)
    assert [(p.chunk_id is not None, p.blocks[0].lines) for p in section.passages] == [(True, ("Chinese text is cut by jieba.",))]


def test_a_lone_line_that_looks_like_a_table_row_is_read_as_prose():
    # Such a line once counted as a row but not as a paragraph, and text_blocks never returned.
    blocks = text_blocks("intro\n\n--mode bm25|vector|hybrid\n\nend\nx | y\nstill prose")

    assert [b.kind for b in blocks] == ["paragraph", "paragraph", "paragraph"]
    assert blocks[1].lines == ("--mode bm25|vector|hybrid",)
    assert blocks[2].lines == ("end", "x | y", "still prose")


def test_a_paragraph_stops_where_a_table_starts():
    blocks = text_blocks("Weights:\na | b\n1 | 2")

    assert [b.kind for b in blocks] == ["paragraph", "table"]
    assert blocks[1].rows == (("a", "b"), ("1", "2"))


def test_pages_fill_to_the_budget_and_hold_at_least_one_parent():
    assert page_numbers([], 100, 10) == []
    assert page_numbers([40, 40, 40, 250, 10], 100, 10) == [1, 1, 2, 3, 4]
    assert page_numbers([100, 1], 100, 10) == [1, 2]
    assert page_numbers([1] * 5, 100, 2) == [1, 1, 2, 2, 3]  # tiny sections: a page holds at most 2


def test_a_long_outline_keeps_this_pages_sections_and_the_chapters():
    items = [OutlineItem(pk, str(pk), f"s{pk}", 1 if pk % 10 == 0 else 2, 1 + pk // 50) for pk in range(200)]

    assert visible_outline(items, 1, 500) == items
    shown = visible_outline(items, 2, 60)
    assert [i.parent_id for i in shown] == sorted(i.parent_id for i in shown)  # document order
    assert {i.parent_id for i in shown if i.page == 2} == set(range(50, 100))
    assert {i.parent_id for i in shown if i.page != 2} == {0, 10, 20, 30, 40, 100, 110, 120, 130, 140}
    assert len(visible_outline(items, 2, 20)) == 20
