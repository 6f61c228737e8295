"""Entities and relations a document's structure states, not its sentences.

- Headings ("## 2.1 实体提取"): a section entity each, a sub-section `part_of` the one above it.
- Table rows ("| name | type |", or "name | type" as the parsers write tables): the row's
  first cell is its subject; a cell under a header that names an attribute ("type", "类型",
  "默认值", "模块", …) gives a relation named after that attribute.
- Key–value lines ("字段：top_k，类型：int，默认值：5"): the first value is the subject, each
  further pair a relation by its key.
- Code identifiers: file names (quality_gate.py), module paths (knowledge.retrieval, pipeline/),
  functions (retrieve()), classes (CamelCase in code, `class X`), fields (snake_case in code).

Every pass reads the text line by line, or token by token with a pattern that cannot
backtrack over a run, so a paragraph costs time linear in its length.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field

from .models import EntityType

T = EntityType

# What a file name ends with: the languages and formats a technical KB writes about.
FILE_EXTENSIONS = frozenset(
    "py js ts tsx jsx json md yaml yml toml html css sql txt go rs java kt rb php sh cfg ini csv proto vue c h cpp".split()
)
# Table headers and keys that name an attribute of the row's subject, and the relation each gives.
ATTRIBUTE_RELATIONS: dict[str, str] = {
    **dict.fromkeys(["type", "类型", "数据类型", "kind"], "has_type"),
    **dict.fromkeys(["default", "默认", "默认值", "缺省值"], "has_default"),
    **dict.fromkeys(["module", "模块", "file", "文件", "位置", "location", "path", "路径", "实现"], "implemented_in"),
    **dict.fromkeys(["depends on", "依赖", "dependency", "dependencies"], "depends_on"),
    **dict.fromkeys(["uses", "使用", "技术", "technology", "工具", "tool", "框架", "framework", "模型", "model"], "uses"),
    **dict.fromkeys(["contains", "包含", "组件", "components", "字段", "fields", "成员"], "contains"),
    **dict.fromkeys(["unit", "单位"], "has_unit"),
}
# The key (or first header) that names what a row is about: its subject is a field.
FIELD_KEYS = frozenset(
    ["字段", "字段名", "参数", "参数名", "属性", "配置", "配置项", "设置", "环境变量", "列", "列名", "field", "name",
     "parameter", "param", "option", "setting", "column", "variable", "key", "名称"]
)

# One class repeated and nothing after it: each character is read once, never again on a retry.
_LATIN_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
_KV_SEPARATORS = re.compile(r"[，,；;]")
_LIST_SEPARATORS = re.compile(r"[+、,，]| and | 和 ")
_HEADING_NUMBER = re.compile(r"^(?:第[一二三四五六七八九十\d]{1,4}[章节部分]|\d{1,3}(?:\.\d{1,3}){0,4}\.?|[一二三四五六七八九十]{1,3}、)\s*")
_MARKUP = str.maketrans("", "", "*`_[]")


@dataclass(frozen=True)
class StructuralMention:
    surface: str
    type: str
    start: int


@dataclass
class StructuralFacts:
    mentions: list[StructuralMention] = field(default_factory=list)
    # (subject, relation, object): the mentions themselves, so the caller finds the name each
    # became where a dictionary term or a pattern took its place.
    relations: list[tuple[StructuralMention, str, StructuralMention]] = field(default_factory=list)


def code_type(name: str, *, in_code: bool = False, followed_by: str = "") -> str | None:
    """The node type a code identifier's shape gives it, or None for a plain word."""
    stem, dot, extension = name.rpartition(".")
    if dot and stem and extension.lower() in FILE_EXTENSIONS:
        # "Node.js", "Vue.js": a framework's name, not a file of the project.
        if not (extension == "js" and stem[:1].isupper() and "/" not in stem):
            return T.FILE
    if followed_by.startswith("()") or followed_by.startswith("("):
        return T.FUNCTION if (in_code or "_" in name or name[:1].islower()) else None
    if in_code and (followed_by.startswith("/") or "/" in name):
        return T.MODULE
    if dot and stem and all(part.isidentifier() and part.islower() for part in name.split(".")):
        return T.MODULE if in_code else None
    if in_code and name[:1].isupper() and any(c.islower() for c in name) and "_" not in name and " " not in name:
        return T.CLASS
    if in_code and "_" in name.strip("_") and name.isidentifier():
        return T.FIELD
    return None


def code_identifiers(text: str) -> Iterator[StructuralMention]:
    """File names, module paths and functions written anywhere in the text (code or not)."""
    for match in _LATIN_TOKEN.finditer(text):
        name = match.group(0).rstrip("./-")
        if len(name) < 3:
            continue
        after = text[match.start() + len(name) : match.start() + len(name) + 2]
        before = text[max(0, match.start() - 6) : match.start()]
        kind = code_type(name, in_code=before.endswith("`"), followed_by=after)
        if kind is None and before.endswith(("class ", "Class ")) and name[:1].isupper():
            kind = T.CLASS
        if kind is None and before.endswith("def ") and name.isidentifier():
            kind = T.FUNCTION
        if kind is not None:
            yield StructuralMention(name, kind, match.start())


def _plain(cell: str) -> str:
    return " ".join(cell.translate(_MARKUP).split()).strip(" :：")


def heading_name(line: str) -> str:
    """A Markdown heading's name without its #s and number ("## 2.1 实体提取" → "实体提取")."""
    name = line.lstrip("#").strip().rstrip("#").strip()
    return _plain(_HEADING_NUMBER.sub("", name))


def _cells(line: str) -> list[tuple[str, int]] | None:
    """The cells of a table row with their offsets in the line, or None for any other line."""
    if "|" not in line:
        return None
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|"):
        body = body[:-1]
    if not body.strip() or ("|" not in body and not line.strip().startswith("|")):
        return None
    cells, offset = [], line.index(body) if body else 0
    for raw in body.split("|"):
        cells.append((raw, offset))
        offset += len(raw) + 1
    return cells if len(cells) >= 2 else None


def _is_separator(cells: list[tuple[str, int]]) -> bool:
    return all(set(raw.strip()) <= set("-: ") for raw, _ in cells)


def _values(cell: str, at: int) -> Iterator[StructuralMention]:
    """The names one cell lists ("`frontend` + `api/`", "int, str"): each piece of 1-40 characters."""
    position = 0
    for piece in _LIST_SEPARATORS.split(cell):
        start = cell.find(piece, position)
        position = start + len(piece)
        name = _plain(piece)
        if 1 <= len(name) <= 40 and len(name.split()) <= 4 and is_name(name):
            yield StructuralMention(name, code_type(name, in_code="`" in piece) or T.CONCEPT, at + start + piece.find(name[:1]))


def _attribute(header: str) -> str | None:
    return ATTRIBUTE_RELATIONS.get(_plain(header).lower())


def structural_facts(text: str) -> StructuralFacts:
    """Headings, table rows and key-value lines of one paragraph, with the relations they state."""
    facts = StructuralFacts()
    sections: list[tuple[int, StructuralMention]] = []  # the open headings, outermost first
    header: list[str] | None = None
    offset = 0
    for line in text.split("\n"):
        stripped = line.lstrip()
        if stripped.startswith("#") and not stripped.startswith("#!"):
            header = None
            level = len(stripped) - len(stripped.lstrip("#"))
            name = heading_name(stripped)
            if 2 <= len(name) <= 60 and level <= 6:
                heading = StructuralMention(name, T.SECTION, offset + line.find(name[:1], len(line) - len(stripped) + level))
                facts.mentions.append(heading)
                while sections and sections[-1][0] >= level:
                    sections.pop()
                if sections:
                    facts.relations.append((heading, "part_of", sections[-1][1]))
                sections.append((level, heading))
        elif (cells := _cells(line)) is not None:
            if _is_separator(cells):
                pass
            elif header is None:
                header = [_plain(raw) for raw, _ in cells]
            else:
                _table_row(facts, header, cells, offset)
        else:
            header = None
            _key_values(facts, line, offset)
        offset += len(line) + 1
    return facts


def _table_row(facts: StructuralFacts, header: list[str], cells: list[tuple[str, int]], offset: int) -> None:
    raw, at = cells[0]
    subject = _plain(raw)
    if not (1 <= len(subject) <= 40) or len(subject.split()) > 4 or not is_name(subject):
        return
    shaped = code_type(subject, in_code="`" in raw)
    kind = shaped or (T.FIELD if header and header[0].lower() in FIELD_KEYS else T.CONCEPT)
    row = StructuralMention(subject, kind, offset + at + raw.find(subject[:1]))
    facts.mentions.append(row)
    for column, (cell, cell_at) in enumerate(cells[1:], 1):
        relation = _attribute(header[column]) if column < len(header) else None
        if relation is None:
            continue  # a description column: its names are the sentences' business
        for value in _values(cell, offset + cell_at):
            if value.surface != subject:
                facts.mentions.append(value)
                facts.relations.append((row, relation, value))


def _key_values(facts: StructuralFacts, line: str, offset: int) -> None:
    """"字段：top_k，类型：int" → top_k (field) has_type int."""
    if "：" not in line and ": " not in line:
        return
    pairs: list[tuple[str, str, int]] = []
    position = 0
    for segment in _KV_SEPARATORS.split(line):
        start = line.find(segment, position)
        position = start + len(segment)
        key, colon, value = segment.partition("：") if "：" in segment else segment.partition(": ")
        key = _plain(key.lstrip("-*> "))
        if colon and key and len(key) <= 12 and len(key.split()) <= 2:
            pairs.append((key, value, offset + start + len(segment) - len(value)))
    if len(pairs) < 2 or pairs[0][0].lower() not in FIELD_KEYS:
        return
    subject = _plain(pairs[0][1])
    if not (1 <= len(subject) <= 40) or not is_name(subject):
        return
    row = StructuralMention(subject, code_type(subject, in_code=True) or T.FIELD, pairs[0][2] + pairs[0][1].find(subject[:1]))
    facts.mentions.append(row)
    for key, value, at in pairs[1:]:
        relation = _attribute(key)
        name = _plain(value)
        if relation and 1 <= len(name) <= 40 and is_name(name):
            attribute = StructuralMention(name, code_type(name, in_code=True) or T.CONCEPT, at + value.find(name[:1]))
            facts.mentions.append(attribute)
            facts.relations.append((row, relation, attribute))


def is_name(surface: str) -> bool:
    """Whether a cell or value is worth a node: letters in it, not only punctuation or numbers."""
    return any(unicodedata.category(c)[0] == "L" for c in surface)
