"""Answers as HTML: Markdown rendered server-side, sanitised with an allow-list, and every
`[n]` that names a stored evidence item turned into a link that opens it."""

from __future__ import annotations

import re
from collections.abc import Collection

import markdown
import nh3
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext

ALLOWED_TAGS = {
    "p", "br", "hr", "strong", "em", "b", "i", "del", "sup", "sub", "code", "pre", "blockquote",
    "ul", "ol", "li", "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th",
    "td", "a",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "th": {"align"}, "td": {"align"}, "ol": {"start"}}
URL_SCHEMES = {"http", "https", "mailto"}
EXTENSIONS = ["fenced_code", "sane_lists", "tables"]
EXTENSION_CONFIGS = {"tables": {"use_align_attribute": True}}

_TAG_OR_TEXT = re.compile(r"(<[^>]*>)")
_CITATION = re.compile(r"\[(\d{1,3}(?:\s*[,，]\s*\d{1,3})*)\]")
# Inside these a `[n]` is literal text (code) or already a link.
_VERBATIM = {"pre", "code", "a"}


def render_markdown(text: str, *, evidence_key: str = "", numbers: Collection[int] = ()) -> SafeString:
    """Render an answer's Markdown as safe HTML; `[n]` for n in numbers links its evidence."""
    html = markdown.markdown(text or "", extensions=EXTENSIONS, extension_configs=EXTENSION_CONFIGS)
    html = nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes=URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
    )
    if numbers:
        html = _link_citations(html, evidence_key, set(numbers))
    return mark_safe(html)  # noqa: S308  (sanitised above; citation links are built here)


def _link_citations(html: str, key: str, numbers: set[int]) -> str:
    parts = _TAG_OR_TEXT.split(html)
    depth = 0
    for index, part in enumerate(parts):
        if part.startswith("<"):
            name = part.strip("</>").split()[0].lower() if part.strip("</>") else ""
            if name in _VERBATIM:
                depth += -1 if part.startswith("</") else 1
        elif depth == 0 and "[" in part:
            parts[index] = _CITATION.sub(lambda m: _citation_link(m, key, numbers), part)
    return "".join(parts)


def _citation_link(match: re.Match, key: str, numbers: set[int]) -> str:
    cited = [int(n) for n in re.findall(r"\d+", match.group(1))]
    if not any(n in numbers for n in cited):
        return match.group(0)
    return "".join(_link(n, key) if n in numbers else f"[{n}]" for n in cited)


def _link(n: int, key: str) -> str:
    key = escape(key)
    title = gettext("Evidence %(n)s") % {"n": n}
    return (
        f'<a class="cite" href="#ev-{key}-{n}" data-cite="{n}" data-evidence="{key}"'
        f' title="{escape(title)}">{n}</a>'
    )
