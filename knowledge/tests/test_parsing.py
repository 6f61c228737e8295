from __future__ import annotations

import io
import zipfile

import docx
import pytest
from pypdf import PdfReader, PdfWriter

from knowledge.parsing import SUPPORTED_EXTENSIONS, ParseError, decode_text, parse_document

MARKDOWN = """\
# 桥梁施工方案

编制说明。

## 一、施工部署

总体安排。

### 施工准备

```bash
# 这不是标题
make build
```

| 工序 | 工期 |
|------|------|
| 架梁 | 30 天 |

## 二、质量控制

Setext Heading
--------------

按 **GB 50204-2015** 验收。
"""

PLAIN_TEXT = """\
XX大桥施工方案

第一章 总则
本方案适用于XX大桥。

一、编制依据
1. 施工图纸；
2. 现行规范。

第二章 施工部署
一、施工准备
（一）技术准备
组织图纸会审。
（二）现场准备
完成三通一平。
"""

HTML = """\
<html><head><meta charset="utf-8"><title>页面标题</title>
<style>p { color: red }</style><script>var s = "<h2>假标题</h2>";</script></head>
<body>
<h1>1 工程概况</h1>
<p>本工程位于<b>成都</b>。</p>
<ul><li>主桥</li><li>引桥<ul><li>匝道</li></ul></li></ul>
<table><tr><th>构件</th><th>数量</th></tr><tr><td>箱梁</td><td>48</td></tr></table>
<p>表后说明。<br>第二行</p>
<h2>1.1 地质条件</h2>
<pre>孔号  深度
ZK1   32.5</pre>
</body></html>
"""


def _pdf(lines: list[str]) -> bytes:
    """Write a one-page PDF whose font maps each glyph id back to its character."""
    chars = sorted({char for line in lines for char in line})
    glyph = {char: number for number, char in enumerate(chars, start=1)}
    shows = " ".join("<" + "".join(f"{glyph[c]:04X}" for c in line) + "> Tj T*" for line in lines)
    cmap = (
        "/CIDInit /ProcSet findresource begin 12 dict begin begincmap "
        "/CMapName /Test-UCS def /CMapType 2 def "
        "1 begincodespacerange <0000> <FFFF> endcodespacerange "
        f"{len(chars)} beginbfchar\n"
        + "\n".join(f"<{glyph[c]:04X}> <{ord(c):04X}>" for c in chars)
        + "\nendbfchar endcmap CMapName currentdict /CMap defineresource pop end end"
    )
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792]"
        b" /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type0 /BaseFont /STSong-Light /Encoding /Identity-H"
        b" /DescendantFonts [6 0 R] /ToUnicode 7 0 R >>",
        _pdf_stream(f"BT /F1 12 Tf 72 740 Td 16 TL {shows} ET".encode()),
        b"<< /Type /Font /Subtype /CIDFontType0 /BaseFont /STSong-Light"
        b" /CIDSystemInfo << /Registry (Adobe) /Ordering (Identity) /Supplement 0 >> >>",
        _pdf_stream(cmap.encode()),
    ]
    return _pdf_file(objects)


def _pdf_stream(data: bytes) -> bytes:
    return b"<< /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"


def _pdf_file(objects: list[bytes]) -> bytes:
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\n" % (len(objects) + 1)
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


PDF_LINES = ["XX大桥施工方案", "1 概述", "本工程位于成都市。", "2.1 施工准备", "Use HNSW and RRF."]


def _encrypted(pdf: bytes, user_password: str) -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf)))
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _docx() -> bytes:
    document = docx.Document()
    document.add_heading("XX大桥施工方案", 0)
    document.add_paragraph("编制说明。")
    document.add_heading("工程概况", 1)
    document.add_paragraph("表前段落。")
    table = document.add_table(rows=2, cols=2)
    for row, values in zip(table.rows, [("构件", "数量"), ("箱梁", "48 片")], strict=True):
        for cell, value in zip(row.cells, values, strict=True):
            cell.text = value
    document.add_paragraph("表后段落。")
    document.add_heading("施工准备", 2)
    document.add_paragraph("准备内容。")
    document.add_heading("第二章 施工部署", 1)
    document.add_paragraph("部署内容。")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _outline(name: str, data: bytes) -> list[tuple[str, str, int, str, str]]:
    doc = parse_document(name, data)
    return [
        (s.index, s.title, s.level, s.chapter_level_1, s.chapter_level_2) for s in doc.sections
    ]


def test_it_reads_markdown_headings_into_numbered_sections():
    assert _outline("plan.md", MARKDOWN.encode()) == [
        ("", "桥梁施工方案", 0, "", ""),
        ("1", "施工部署", 1, "施工部署", ""),
        ("1.1", "施工准备", 2, "施工部署", "施工准备"),
        ("2", "质量控制", 1, "质量控制", ""),
        ("3", "Setext Heading", 1, "Setext Heading", ""),  # "---" underline is an h2, like "##"
    ]


def test_it_keeps_code_and_tables_of_markdown_as_text():
    doc = parse_document("plan.md", MARKDOWN.encode())
    preparation = doc.sections[2].text
    assert "# 这不是标题" in preparation
    assert "架梁 | 30 天" in preparation
    assert "---" not in preparation
    assert doc.sections[4].text == "按 GB 50204-2015 验收。"
    assert doc.title == "桥梁施工方案"


def test_markdown_code_spans_keep_their_text_as_written():
    doc = parse_document("calc.md", b"# Calculator\n\nAttacks: `__import__`, `a**b**c` and **bold** [words](https://x).\n")
    assert doc.sections[0].text == "Attacks: __import__, a**b**c and bold words."
    plain = parse_document("notes.md", b"Edit __init__.py, then __save it__.\n")
    assert plain.sections[0].text == "Edit __init__.py, then save it."


def test_it_treats_several_top_headings_as_chapters_not_a_title():
    doc = parse_document("a.markdown", b"# One\n\nalpha\n\n# Two\n\nbeta\n")
    outline = [(s.index, s.title, s.level) for s in doc.sections]
    assert outline == [("1", "One", 1), ("2", "Two", 1)]
    assert doc.title == "One"


def test_it_detects_numbered_headings_in_plain_text():
    assert _outline("plan.txt", PLAIN_TEXT.encode()) == [
        ("", "", 0, "", ""),
        ("1", "总则", 1, "总则", ""),
        ("1.1", "编制依据", 2, "总则", "编制依据"),
        ("2", "施工部署", 1, "施工部署", ""),
        ("2.1", "施工准备", 2, "施工部署", "施工准备"),
        ("2.1.1", "技术准备", 3, "施工部署", "施工准备"),
        ("2.1.2", "现场准备", 3, "施工部署", "施工准备"),
    ]


def test_it_keeps_list_items_in_plain_text_as_body():
    doc = parse_document("plan.txt", PLAIN_TEXT.encode())
    assert doc.sections[0].text == "XX大桥施工方案"
    assert doc.sections[2].text == "1. 施工图纸；\n2. 现行规范。"


def test_it_uses_dotted_numbers_as_section_indices():
    text = "1 概述\n工程简介。\n\n2 施工准备\n\n2.1 技术准备\n图纸会审。\n\n2.2 现场准备\n平整场地。\n"
    assert _outline("plan.txt", text.encode()) == [
        ("1", "概述", 1, "概述", ""),
        ("2", "施工准备", 1, "施工准备", ""),
        ("2.1", "技术准备", 2, "施工准备", "技术准备"),
        ("2.2", "现场准备", 2, "施工准备", "现场准备"),
    ]


def test_it_ignores_lines_that_only_look_numbered():
    text = "3D打印技术\n\n20年来的经验\n\n1 概述 .......... 3\n\n2 荷载为 10 kN，满足要求。\n"
    doc = parse_document("notes.txt", text.encode())
    assert [(s.index, s.title, s.level) for s in doc.sections] == [("", "", 0)]


def test_it_makes_plain_text_without_headings_one_section_titled_by_the_file_stem():
    doc = parse_document("现场记录.txt", "第一段。\n\n第二段。".encode())
    assert doc.title == "现场记录"
    assert [(s.index, s.title, s.level, s.text) for s in doc.sections] == [
        ("", "", 0, "第一段。\n\n第二段。")
    ]
    assert doc.char_count == len("第一段。\n\n第二段。")


def test_it_reads_html_headings_lists_and_tables_in_order():
    doc = parse_document("page.HTML", HTML.encode())
    assert [(s.index, s.title, s.level) for s in doc.sections] == [
        ("1", "工程概况", 1),
        ("1.1", "地质条件", 2),
    ]
    assert doc.sections[0].text == (
        "本工程位于成都。\n\n- 主桥\n- 引桥\n  - 匝道\n\n构件 | 数量\n箱梁 | 48\n\n表后说明。\n第二行"
    )
    assert doc.sections[1].text == "孔号  深度\nZK1   32.5"


def test_it_skips_script_style_and_title_in_html():
    doc = parse_document("page.htm", HTML.encode())
    everything = " ".join(s.title + s.text for s in doc.sections)
    assert "假标题" not in everything
    assert "color" not in everything
    assert "页面标题" not in everything


def test_it_extracts_pdf_text_and_numbered_headings():
    doc = parse_document("plan.pdf", _pdf(PDF_LINES))
    assert [(s.index, s.title, s.text) for s in doc.sections] == [
        ("", "", "XX大桥施工方案"),
        ("1", "概述", "本工程位于成都市。"),
        ("2.1", "施工准备", "Use HNSW and RRF."),
    ]


def test_it_rejects_a_password_protected_pdf():
    with pytest.raises(ParseError, match="password-protected"):
        parse_document("plan.pdf", _encrypted(_pdf(PDF_LINES), user_password="secret"))


def test_it_reads_a_pdf_encrypted_only_with_an_owner_password():
    doc = parse_document("plan.pdf", _encrypted(_pdf(PDF_LINES), user_password=""))
    assert doc.sections[1].text == "本工程位于成都市。"


@pytest.mark.parametrize(
    "data",
    [
        b"%PDF-1.7\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R",
        _pdf(PDF_LINES)[:300],
        b"%PDF-1.4\n" + bytes(range(256)) * 4,
    ],
)
def test_it_rejects_a_corrupt_pdf(data):
    with pytest.raises(ParseError, match="not a valid PDF"):
        parse_document("plan.pdf", data)


def test_it_rejects_a_pdf_without_extractable_text():
    writer = PdfWriter()
    writer.add_blank_page(width=612, height=792)
    out = io.BytesIO()
    writer.write(out)
    with pytest.raises(ParseError, match=r"no extractable text \(scanned images\?\)"):
        parse_document("scan.pdf", out.getvalue())


def test_it_reads_docx_headings_and_tables_in_document_order():
    doc = parse_document("plan.docx", _docx())
    assert doc.title == "XX大桥施工方案"
    assert _outline("plan.docx", _docx()) == [
        ("", "XX大桥施工方案", 0, "", ""),
        ("1", "工程概况", 1, "工程概况", ""),
        ("1.1", "施工准备", 2, "工程概况", "施工准备"),
        ("2", "施工部署", 1, "施工部署", ""),
    ]
    assert doc.sections[1].text == "表前段落。\n\n构件 | 数量\n箱梁 | 48 片\n\n表后段落。"


def test_it_rejects_a_docx_that_is_not_a_zip():
    with pytest.raises(ParseError, match=r"^not a valid \.docx \(not a zip archive\)$"):
        parse_document("old.docx", b"\xd0\xcf\x11\xe0 an OLE .doc renamed")


def test_it_rejects_a_zip_that_is_not_a_docx():
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as package:
        package.writestr("readme.txt", "hello")
    with pytest.raises(ParseError, match=r"not a valid \.docx"):
        parse_document("fake.docx", archive.getvalue())


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ("施工准备".encode("utf-16"), "施工准备"),  # BOM + little endian
        (b"\xfe\xff" + "施工准备".encode("utf-16-be"), "施工准备"),
        ("施工准备".encode("utf-8-sig"), "施工准备"),
        ("混凝土浇筑前应检查模板支撑体系，合格后方可施工。".encode("gbk"), "混凝土浇筑前应检查模板支撑体系，合格后方可施工。"),
        ("施工准备".encode("gbk"), "施工准备"),
        ("混凝土澆築前應檢查模板支撐體系，合格後方可施工。".encode("big5"), "混凝土澆築前應檢查模板支撐體系，合格後方可施工。"),
        ("施工準備".encode("big5"), "施工準備"),
        # Both of these also decode cleanly as GB18030; charset-normalizer breaks the tie.
        ("環境保護".encode("big5"), "環境保護"),
        ("軟體開發".encode("big5"), "軟體開發"),
        ("€ 欧元符号与𠀀扩展字".encode("gb18030"), "€ 欧元符号与𠀀扩展字"),
    ],
)
def test_it_decodes_boms_and_legacy_chinese_encodings(data, expected):
    assert decode_text(data) == expected


def test_it_reads_a_gbk_text_file_end_to_end():
    doc = parse_document("plan.txt", PLAIN_TEXT.encode("gbk"))
    assert doc.sections[1].title == "总则"


@pytest.mark.parametrize("data", [b"\x00\x01\x02PK binary\x00", bytes(range(1, 32)) * 20])
def test_it_rejects_binary_content_named_as_text(data):
    with pytest.raises(ParseError, match="binary content"):
        parse_document("data.txt", data)


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("a.txt", b""),
        ("a.md", b"  \n\t\n"),
        ("a.pdf", b""),
        ("a.docx", b""),
        ("a.txt", b"\xff\xfe"),  # a UTF-16 BOM and nothing after it
    ],
)
def test_it_rejects_an_empty_file(name, data):
    with pytest.raises(ParseError, match="^the file is empty$"):
        parse_document(name, data)


def test_it_names_the_unsupported_extension_and_the_supported_ones():
    with pytest.raises(ParseError) as error:
        parse_document("budget.xlsx", b"PK\x03\x04")
    message = str(error.value)
    assert "'.xlsx'" in message
    assert all(extension in message for extension in SUPPORTED_EXTENSIONS)


def test_it_rejects_a_file_without_extension():
    with pytest.raises(ParseError, match="no extension"):
        parse_document("README", b"hello")


def test_it_matches_extensions_case_insensitively():
    doc = parse_document("PLAN.MD", b"# A\n\ntext\n\n# B\n\nmore\n")
    assert [s.title for s in doc.sections] == ["A", "B"]
