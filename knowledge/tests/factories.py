"""Small builders of files the tests ingest."""

from __future__ import annotations

import io

from pypdf import PdfWriter

GUIDE_MD = """# 1 Overview

Agentic RAG ingests documents into parent and child chunks. Each section becomes a parent.

## 1.1 Parsers

Markdown, text, HTML, PDF and DOCX files are parsed into sections with their headings.

# 2 施工准备

按照 GB 50204-2015 和《混凝土结构工程施工质量验收规范》执行。施工前应完成技术交底。
"""


def encrypted_pdf() -> bytes:
    writer = PdfWriter()
    writer.add_blank_page(width=200, height=200)
    writer.encrypt("secret")
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()
