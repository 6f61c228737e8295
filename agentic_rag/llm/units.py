"""Evidence text as a reader sees it: Markdown stripped, tables as "header: cell" rows, units.

Ingestion stores a Markdown table as lines of cells joined by " | ", its header first. Quoted
alone, a row ("RRF | multi-source rank fusion, k = 60 | O(n log n)") loses what its cells
mean and the header row says nothing at all, so `readable_text` writes each row with its
header ("processor: RRF, rule: multi-source rank fusion, k = 60, cost: O(n log n)"). The
citation check reads sources through the same function, so a quoted row verifies.

Units also keep the text's structure: a lead-in ("5 个处理器链式执行:") and the list, table or
code block it introduces share a block, so the reader quotes them together; a heading ("7.6 质量
门控") or a line of a box drawing ("│ └─ 质量门控") is a unit only so that the reader knows what
surrounds its neighbours, never an answer; rules ("---", "====") are not units at all.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_HAS_CJK = re.compile(f"[{_CJK}]")
_LATIN_LETTERS = re.compile(r"[A-Za-z]")
# "---", "| :-- | --: |": possessive, and never two runs of spaces side by side (as in
# "\s*\|?\s*"), which would split a long run of spaces every way there is before failing.
TABLE_SEPARATOR = re.compile(r"^\s*+(?:\|\s*+)?:?-{2,}+:?\s*+(?:\|\s*+:?-{2,}+:?\s*+)*+(?:\|\s*+)?$")
# A link "[label](target)" and emphasis "**x**", "__x__" are found by the scanners below, not by
# one regex: a regex tries again from every "[" or "**" that has no end, reading to the line's
# end each time, quadratic in a line of them.
_LABEL_END = re.compile(r"[\]\n]")
_TARGET_END = re.compile(r"[)\s]")
# Not "__import__": a name between double underscores is a dunder name (ingestion has already
# taken its code ticks away), not bold text.
_EMPHASIS_OPEN = re.compile(r"\*\*(?=\S)|(?<!\w)__(?=\S)(?!\w+__(?!\w))")
_EMPHASIS_CLOSE = {"*": re.compile(r"(?<=\S)(?=\*\*)"), "_": re.compile(r"(?<=\S)(?=__(?!\w))")}
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_HEADING_MARK = re.compile(r"^\s{0,3}#{1,6}\s+")
LIST_MARK = re.compile(r"^\s*(?:[-*+•]|\d{1,2}[.)、])\s+")
_QUOTE_MARK = re.compile(r"^\s*>\s?")
# A sentence ends after 。！？!? (with closing quotes), or after a full stop followed by
# space or the end (so 3.5 and example.com stay whole). Not at "；": the clauses it joins
# share their subject ("全栈（设置 REDIS_URL）：任务进入 Redis 队列；进度经 Redis 送达").
# A run of full stops is tried from its first only, and whole: from each of them it would be read
# to the run's end again before the test for a space after it failed.
_SENTENCE_END = re.compile(r"""[。！？!?]+[”’」』"')\]]*|(?<!\.)\.++[”’"')\]]*+(?=\s|$)""")
# Lines that are commands, code or data rather than prose: a shell prompt or a command
# name first, a JSON/code shape, or a line continued with a backslash.
_COMMAND = re.compile(
    r"""^\s*(?:\$\s|>>>\s|(?:curl|wget|pip|python3?|\.venv/|make|git|docker|npm|celery|daphne|export|cd|sudo|apt(?:-get)?)\b"""
    r"""|manage\.py\b|[{}\[\]]\s*$|[{\[]["'{]|(?:def|class|import|from|return)\s)"""
    r"""|\\\s*$|^\s*-[-A-Za-z]\S*\s""",
)
_NUMBER = re.compile(r"^[\d.,%~<>≤≥+-]+$")
_CODE_CHARS = re.compile(r"[{}();=<>$\\/_`]")
_JSON_KEYS = re.compile(r'"[\w-]+"\s*:')
_NUMBERING = re.compile(r"^\s*(?:#{1,6}\s*)?(?:\d+(?:\.\d+)*\.?|[一二三四五六七八九十]+[、.．])?\s*")
_BARE_REPLY = re.compile(r"^(?:能|不能|可以|不可以|会|不会|是|不是|否|对|不|yes|no|right)[。.！!]$", re.IGNORECASE)
# A run-in heading opens a paragraph or list item ("**Charts.** nDCG@10 … over the newest 12
# runs", "**维护。** 只读索引扫描…"): a few words with a full stop, naming what follows.
_RUN_IN_HEADING = re.compile(r"^(?:[A-Za-z][\w-]*(?:\s+[\w-]+)?\.|[\u4e00-\u9fff]{1,6}。)$")
# A number that only numbers what follows it ("1. 迁移目标", "2.3) 字段"): not a sentence.
_ENUMERATOR = re.compile(r"^\(?\d+(?:\.\d+)*[.)]$")
_BOX_DRAWING = re.compile("[\u2500-\u257f]")
# A section's number, opening a line that is nothing more: "7.6 质量门控", "第三章 总则", "3.2"
# (not a date: "2024.01 发布").
_SECTION_NUMBER = re.compile(r"(?:第[\d一二三四五六七八九十百]++[章节篇部]|\d{1,2}+(?:\.\d{1,3}+)++\.?+|[一二三四五六七八九十]++[、．])")
_CLAUSE_MARK = re.compile(r"[。！？!?；;：:，,]")
_FENCE = re.compile(r"\s{0,3}(?:```|~~~)")
MAX_HEADING_CHARS = 30  # a numbered line longer than this says something: it is not a bare heading
MAX_KEY_CHARS = 20  # "rrf_k: 60", "超时：30 秒": a longer text before the colon is a clause, not a name
LEAD_IN_ENDS = (":", "：")
# A line of code that ends in a colon ("for attempt in range(3):", "else:") introduces code, not a list.
_CODE_OPENING = re.compile(r"(?:for|if|elif|else|while|try|except|finally|with|def|class|async|switch|case|default)\b")
_PAIR_SEPARATOR = re.compile(r"，|,\s")


@dataclass(frozen=True)
class Unit:
    """A sentence, list item or table row of one evidence text, as the reader may quote it."""

    text: str  # readable: Markdown stripped, a table row with its header
    position: int  # order within its evidence text
    kind: str  # "sentence", "item", "row", "heading" or "drawing"
    is_code: bool = False
    table: int = -1  # for a row: which table of its text (rows of one table share it)
    # What the unit states a value of: a row's first cell ("cosine", "429"), the name before a
    # colon in a key-value line ("rrf_k" in "rrf_k: 60"), or the first value of a line of pairs
    # ("rrf_k" in "参数：rrf_k，值：60").
    key: str = ""
    # A lead-in and the list, table or code block it introduces share a block (-1: none).
    block: int = -1
    is_lead_in: bool = False
    # A row's cell under a column of names (名称, name) other than its first: "Query Rewrite" in
    # "阶段：S2，名称：Query Rewrite，目标耗时：<500ms" names the row as much as its key does.
    name: str = ""

    @property
    def is_answer(self) -> bool:
        """Whether the unit may be quoted on its own: not a heading, nor a line of a drawing."""
        return self.kind not in ("heading", "drawing")


class _Line(NamedTuple):
    text: str
    kind: str  # "row", "item", "line", "heading" or "drawing"
    key: str
    gap: bool  # a blank line (or a rule) comes before it
    is_code: bool = False  # a line of a code block: fenced, indented as code, or a "//" comment
    is_comment: bool = False  # "# Agent 特有字段" in code: it heads the lines of code after it
    name: str = ""  # a row's cell under a column of names (Unit.name)


def readable_text(text: str) -> str:
    """text with Markdown syntax stripped and each table row written with its header."""
    return "\n".join(line.text for line in _readable_lines(text))


def split_units(text: str) -> list[Unit]:
    """The units of an evidence text, in order: sentences, items and rows to quote, and the
    headings and drawing lines around them (see Unit.is_answer)."""
    units: list[Unit] = []
    tables, previous = -1, ""
    blocks = _Blocks()
    blocks.open_under(None)  # a passage that opens with a list: its heading is the section's title
    for line in _readable_lines(text):
        if line.kind == "row" and previous != "row":
            tables += 1
        previous = line.kind
        block = blocks.enter(line)
        if line.kind == "heading":
            blocks.open_under(line)
        if line.kind in ("row", "heading", "drawing"):
            is_code = line.kind == "drawing" or is_code_like(line.text)
            table = tables if line.kind == "row" else -1
            units.append(Unit(line.text, len(units), line.kind, is_code, table, line.key, block, name=line.name))
            continue
        pieces = [piece for sentence in _join_leads(split_sentences(line.text)) for piece in _command_then_prose(sentence)]
        lead_block = blocks.open_after(line, pieces[-1][1] or line.is_code) if pieces else -1
        kind = "item" if line.kind == "item" else "sentence"
        for n, (piece, is_code) in enumerate(pieces):
            is_lead_in = n == len(pieces) - 1 and lead_block >= 0
            units.append(Unit(
                piece, len(units), kind, is_code or line.is_code, key=line.key if n == 0 else "",
                block=lead_block if is_lead_in else block, is_lead_in=is_lead_in,
            ))
    return units


class _Blocks:
    """Which lead-in's block each line belongs to, read line by line.

    A line ending in a colon opens a block; the lines after it join it, across one blank line
    right after the lead-in (a code block is its own paragraph), up to the next blank line or
    heading. A heading opens a block for the list right under it ("### 实体消歧三阶段" and its
    three items), which has no lead-in: the block holds the items only.
    """

    def __init__(self) -> None:
        self.count = 0
        self.current = -1
        self.taken = 0
        self.by_comment = False
        self.by_heading = False
        self.rows = False  # the block's lines are a table's rows

    def enter(self, line: _Line) -> int:
        """The block a line joins (-1: none). A comment in words ends the block the comment
        before it opened: each heads the lines of code under it; anything but an item ends a
        heading's list."""
        ends_comment_block = self.by_comment and line.is_comment
        ends_heading_list = self.by_heading and line.kind != "item"
        # A table ends at its last row: "SelectedSection 结构:" right under the request table
        # introduces a table of its own.
        ends_table = self.rows and line.kind != "row"
        if self.current >= 0 and (
            line.kind == "heading" or (line.gap and self.taken) or ends_comment_block or ends_heading_list or ends_table
        ):
            self.current = -1
        if self.current < 0:
            self.rows = False
            return -1
        if not self.taken:  # the block's first line tells whether it is a table
            self.rows = line.kind == "row"
        self.taken += 1
        return self.current

    def open_under(self, heading: _Line | None) -> None:
        """Open the block of the list that may follow heading, or start the text (it ends at once
        if none does)."""
        self.current, self.taken, self.by_comment, self.by_heading = self.count, 0, False, True
        self.count += 1

    def open_after(self, line: _Line, is_code: bool) -> int:
        """The block a lead-in line opens (-1 if it is not one). Blocks do not nest: a line ending
        in a colon inside a block ("for attempt in range(3):" in the code a lead-in introduces)
        is one of its lines. An item of a heading's list that ends in a colon opens its own block:
        it introduces the items under it, not the list it is one of."""
        if self.current >= 0 and self.taken and not self.by_heading:
            return -1
        if line.is_comment and not is_code:
            self.current, self.taken, self.by_comment, self.by_heading = self.count, 0, True, False
            self.count += 1
            return self.current
        if is_code or line.kind not in ("line", "item") or not line.text.endswith(LEAD_IN_ENDS):
            return -1
        if _CODE_OPENING.match(line.text):
            return -1
        self.current, self.taken, self.by_comment, self.by_heading = self.count, 0, False, False
        self.count += 1
        return self.current


def _command_then_prose(sentence: str) -> list[tuple[str, bool]]:
    """A sentence that opens with a command and goes on in prose ("manage.py evaluate …，指标包括
    nDCG@10、MRR@10"): the command, then the prose, which can be quoted on its own. Each
    piece comes with whether it is code."""
    if not is_code_like(sentence):
        return [(sentence, False)]
    command, comma, prose = sentence.partition("，")
    if not comma or not _HAS_CJK.search(prose) or is_code_like(prose):
        return [(sentence, True)]
    command = command.strip()
    return [(command, is_code_like(command)), (prose.strip(), False)]


def _join_leads(sentences: list[str]) -> list[str]:
    """"不能。" or "Yes." alone says nothing, a line's run-in heading ("Charts.") only names its
    subject, and "1." only numbers it: each belongs with the sentence after it."""
    joined: list[str] = []
    for sentence in sentences:
        lead = joined and (
            _BARE_REPLY.match(joined[-1]) or _ENUMERATOR.match(joined[-1])
            or (len(joined) == 1 and _RUN_IN_HEADING.match(joined[0]))
        )
        if lead:
            joined[-1] = f"{joined[-1]}{'' if has_cjk(joined[-1]) else ' '}{sentence}"
        else:
            joined.append(sentence)
    return joined


def split_sentences(text: str) -> list[str]:
    """Split one line of Chinese or English text into stripped sentences, each a substring.

    Never inside brackets: "按句末标点（。！？ 及英文句号）切分" is one sentence.
    """
    sentences: list[str] = []
    start = depth = read = 0
    for match in _SENTENCE_END.finditer(text):
        # The depth is carried on from the last end skipped, not counted again from the
        # sentence's start: a long bracket with many ends inside would be read once per end.
        depth, read = _bracket_depth(text, read, match.start(), depth), match.start()
        if depth > 0:
            continue
        sentences.append(text[start : match.end()].strip())
        start = read = match.end()
    sentences.append(text[start:].strip())
    return [sentence for sentence in sentences if sentence]


def _bracket_depth(text: str, start: int, end: int, depth: int = 0) -> int:
    """The bracket depth at end, counting from start at depth; a closing bracket never goes below 0.

    A markup tag is a bracket too: '<cite doc_id="..." quote="...">' is not two sentences."""
    for position in range(start, end):
        char = text[position]
        if char in "（(" or char == "<" and _OPENS_TAG.match(text, position + 1):
            depth += 1
        elif depth and (char in "）)" or char == ">" and text[position - 1 : position] not in ("-", "=")):
            depth -= 1  # not the ">" of an arrow ("A -> B")
    return depth


_OPENS_TAG = re.compile(r"/?[A-Za-z]")


def strip_markdown(line: str) -> str:
    """A line without emphasis, inline-code ticks, link targets, heading or quote marks.

    Inline code keeps its text as written: `__import__` is a name, not bold "import".
    """
    line = _HEADING_MARK.sub("", _QUOTE_MARK.sub("", line))
    pieces = _CODE_SPAN.split(line)  # odd pieces are code spans' contents
    for i in range(0, len(pieces), 2):
        pieces[i] = _strip_emphasis(_strip_links(pieces[i]))
    return "".join(pieces).replace("`", "").strip()


def _strip_links(text: str) -> str:
    """text with each link or image "[label](target)" written as its label, on one line each.

    A "[" takes the label up to the first "]" on its line, and the target up to the first ")"
    or space after "](": every "[" before that "]" ends the same way, so one that fails lets the
    search go on after the "]", and a target's end once read is not read again.
    """
    if "](" not in text:
        return text
    pieces, done, at = [], 0, 0
    target_from = target_end = -1  # text[target_from:target_end] holds no ")" nor space
    while (opening := text.find("[", at)) != -1:
        label_end = _LABEL_END.search(text, opening + 1)
        if label_end is None:
            break
        stop = label_end.start()
        if text[stop] != "]" or not text.startswith("(", stop + 1):
            at = stop + 1
            continue
        if not target_from <= stop + 2 <= target_end:
            found = _TARGET_END.search(text, stop + 2)
            target_from, target_end = stop + 2, found.start() if found else len(text)
        if not text.startswith(")", target_end):
            at = stop + 1
            continue
        start = opening - 1 if opening > done and text[opening - 1] == "!" else opening
        pieces += [text[done:start], text[opening + 1 : stop]]
        done = at = target_end + 1
    pieces.append(text[done:])
    return "".join(pieces)


def _strip_emphasis(text: str) -> str:
    """text with "**x**" and "__x__" written x, x on one line and not starting or ending in a space.

    An opening mark takes the first closing mark of its kind after it on its line; the closing
    marks are found once, so an opening mark without one does not read the line again.
    """
    if "**" not in text and "__" not in text:
        return text
    closing = {kind: [m.start() for m in pattern.finditer(text)] for kind, pattern in _EMPHASIS_CLOSE.items()}
    newlines = [m.start() for m in re.finditer("\n", text)]
    pieces, done, at = [], 0, 0
    while (opening := _EMPHASIS_OPEN.search(text, at)) is not None:
        start = opening.start()
        marks = closing[text[start]]
        k = bisect_left(marks, start + 3)  # at least one character between the marks
        line = bisect_left(newlines, start)
        line_end = newlines[line] if line < len(newlines) else len(text)
        if k == len(marks) or marks[k] > line_end:
            at = start + 1
            continue
        pieces += [text[done:start], text[start + 2 : marks[k]]]
        done = at = marks[k] + 2
    pieces.append(text[done:])
    return "".join(pieces)


def is_code_like(text: str) -> bool:
    """Whether a unit is a command, code or a data literal rather than prose."""
    if _COMMAND.search(text) or len(_JSON_KEYS.findall(text)) >= 2:
        return True
    letters = sum(ch.isalpha() for ch in text)
    return len(text) >= 12 and len(_CODE_CHARS.findall(text)) > max(4, letters // 4)


def is_heading_of(text: str, section_title: str) -> bool:
    """Whether text is only its section's heading ("2. Keyword leg (BM25)" under "Keyword leg
    (BM25)"): it names what the section is about and answers nothing."""
    return bool(section_title.strip()) and _bare(text) == _bare(section_title)


def strip_numbering(title: str) -> str:
    """A heading without its Markdown marks and number: "## 4.2 SQuAD format" → "SQuAD format"."""
    return _NUMBERING.sub("", title, count=1)


def _bare(text: str) -> str:
    return " ".join(strip_numbering(text).casefold().split())


def has_cjk(text: str) -> bool:
    return _HAS_CJK.search(text) is not None


def text_language(text: str) -> str:
    """"zh" or "en". Chinese prose quotes English names freely ("pending → … → ready；任一阶段出错
    则为 failed"), English prose rarely Chinese: a text is Chinese when it holds a clause's worth
    of Chinese characters, or when they carry more of it than its Latin letters (one says about
    as much as three), as in "要求：python3 3.11 及以上"."""
    cjk = len(_HAS_CJK.findall(text))
    return "zh" if cjk >= 10 or 3 * cjk >= len(_LATIN_LETTERS.findall(text)) else "en"


def _readable_lines(text: str) -> Iterator[_Line]:
    """The lines of text as the reader reads them: table rows with their header, list items,
    headings, drawing lines and other lines, Markdown stripped; rules and blank lines only mark
    a gap before the next line."""
    lines = text.splitlines()
    i, gap, fenced, after_code = 0, False, False, False
    while i < len(lines):
        width = _cell_count(lines[i])
        end = i + 1
        while width >= 2 and end < len(lines) and (_cell_count(lines[end]) == width or TABLE_SEPARATOR.match(lines[end])):
            end += 1
        if width >= 2 and end - i >= 2:
            for n, (row, key, name) in enumerate(_table_rows(lines[i:end])):
                yield _Line(row, "row", key, gap and n == 0, name=name)
            i, gap = end, False
            continue
        line = lines[i]
        i += 1
        if _FENCE.match(line):
            fenced, gap = not fenced, True
            continue
        if TABLE_SEPARATOR.match(line) or _is_rule(line) or not line.strip():
            gap = True
            continue
        kind = "item" if LIST_MARK.match(line) else "line"
        cleaned = strip_markdown(LIST_MARK.sub("", line))
        key = ""
        if width >= 2:  # a lone row: its cells, without the pipes; "| rrf_k | 60 |" states rrf_k
            cells = table_cells(cleaned)
            cleaned, key = ", ".join(cells), cells[0] if width == 2 else ""
        if cleaned:
            kind = _line_kind(line, cleaned, kind, fenced)
            is_code = fenced or (kind == "line" and _is_code_line(line))
            # "# 上下文窗口: 4K tokens" under "SUMMARY_THRESHOLD = 20 # 轮", or indented in a class:
            # a comment of code (whose fences ingestion may have taken away), not a heading. One
            # in words states a fact, and heads the lines of code under it.
            is_comment = bool(_COMMENT_MARK.match(line)) and (is_code or (kind == "heading" and after_code and not gap))
            if is_comment:
                kind, is_code = "line", not _HAS_CJK.search(cleaned)
            key = key or (_key_of(cleaned) if kind in ("line", "item") else "")
            yield _Line(cleaned, kind, key, gap, is_code, is_comment)
            after_code = is_code or kind == "line" and (_COMMENT_MARK.match(line) is not None or ends_in_comment(line) or is_code_like(cleaned))
            gap = False


def _is_code_line(line: str) -> bool:
    """Whether a line outside a fence is code all the same: indented four spaces or a tab (an
    indented code block, or a line inside a block whose fences ingestion took away), or a "//"
    comment ("// 重排序失败，使用原结果" explains code, it is not an answer)."""
    return line.startswith(("    ", "\t")) or line.lstrip().startswith("//")


_COMMENT_MARK = re.compile(r"^\s*#\s")  # one "#": a heading of a section's first level is rare in code
_TRAILING_COMMENT = re.compile(r"[\w)\]}\"']\s+(?:#|//)\s")  # "SUMMARY_THRESHOLD = 20 # 轮"


def ends_in_comment(line: str) -> bool:
    """Whether a line of code ends in a comment: the lines after it may be comments too."""
    return _TRAILING_COMMENT.search(line) is not None and ("=" in line or "(" in line)


def _is_rule(line: str) -> bool:
    """Whether a line only draws a rule: "---", "* * *", "=====", "+----+"."""
    marks = "".join(line.split())
    return len(marks) >= 3 and not marks.strip("-=*_~+|:#")


def _line_kind(line: str, cleaned: str, kind: str, fenced: bool) -> str:
    """"drawing" for a line of a box drawing, "heading" for a bare heading, else kind."""
    if _BOX_DRAWING.search(cleaned):
        return "drawing"
    if fenced or kind != "line":
        return kind
    if _HEADING_MARK.match(line):
        return "heading"
    numbered = _SECTION_NUMBER.match(cleaned)
    bare = numbered and len(cleaned) <= MAX_HEADING_CHARS and not _CLAUSE_MARK.search(cleaned, numbered.end())
    return "heading" if bare else kind


def _key_of(line: str) -> str:
    """What a key-value line states a value of: "rrf_k" in "rrf_k: 60" and in "参数：rrf_k，值：60";
    "" for other lines."""
    pairs = [part.partition("：" if "：" in part else ":") for part in _PAIR_SEPARATOR.split(line)]
    if not all(colon and name.strip() and value.strip() and len(name) <= MAX_KEY_CHARS and len(name.split()) <= 3
               for name, colon, value in pairs):
        return ""
    return pairs[0][2].strip() if len(pairs) >= 2 else pairs[0][0].strip()


# A column of names, matched against a header cell (stripped): its cell names the row (Unit.name).
_NAME_COLUMN = re.compile(r"名称|名字|name", re.IGNORECASE)


def _table_rows(lines: list[str]) -> Iterator[tuple[str, str, str]]:
    """Each body row of a table, written with its header; its first cell; and its cell under a
    column of names other than the first (Unit.name), or ""."""
    rows = [table_cells(strip_markdown(line)) for line in lines if not TABLE_SEPARATOR.match(line)]
    if not _is_header(rows[0]):  # a chunk cut from the middle of a table: rows without names
        for row in rows:
            yield ", ".join(cell for cell in row if cell), row[0], ""
        return
    header, body = rows[0], rows[1:]
    names = next((i for i, title in enumerate(header) if i and _NAME_COLUMN.fullmatch(title)), None)
    # "，" not "；": the citation check reads a sentence as ending at "；".
    joiner, colon = ("，", "：") if has_cjk(" ".join(header)) else (", ", ": ")
    for row in body:
        pairs = [f"{name}{colon}{cell}" if name and name != "#" else cell for name, cell in zip(header, row, strict=False) if cell]
        if pairs:
            yield joiner.join(pairs), row[0] if row else "", row[names] if names is not None and names < len(row) else ""


def row_cells(row: str) -> dict[str, str]:
    """A row as _table_rows writes it with its header ("路径：标签匹配，权重：1.2") read back as
    {column: cell}."""
    pairs = (part.partition("：" if "：" in part else ": ") for part in _PAIR_SEPARATOR.split(row))
    return {name.strip(): cell.strip() for name, colon, cell in pairs if colon and name.strip()}


def _is_header(cells: list[str]) -> bool:
    """Whether a table's first row names its columns: short cells, none a bare number."""
    return all(len(cell) <= 40 and not _NUMBER.match(cell) for cell in cells) and sum(bool(c) for c in cells) >= 2


def _cell_count(line: str) -> int:
    if "|" not in line or TABLE_SEPARATOR.match(line):
        return 0
    return len(table_cells(line))


def table_cells(line: str) -> list[str]:
    """The cells of a Markdown table line, without the outer pipes, each stripped."""
    stripped = line.strip()
    if stripped.startswith("|"):
        stripped = stripped[1:]
    if stripped.endswith("|"):
        stripped = stripped[:-1]
    return [cell.strip() for cell in stripped.split("|")]
