"""Text a user could upload that has broken readers before: hypothesis strategies and a fixed
set of hostile documents, shared by the property tests and the end-to-end ones."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

# Pieces of Markdown, HTML and plain text that readers treat specially, with the characters
# that have tripped parsers elsewhere: pipes (full-width too), fences, list and heading marks,
# CJK and full-width punctuation, zero-width and control characters, CRLF and BOM.
FRAGMENTS = (
    "|", "｜", " | ", "|---|", "| a | b |", "|:--|--:|", "```", "~~~", "`", "``", "# ", "## ", "#", "######## ",
    "- ", "* ", "+ ", "1. ", "1) ", "12、", "> ", "---", "===", "***", "**", "__", "_", "[", "](", ")", "![", "[x]",
    "<", ">", "</p>", "<p>", "<table>", "<tr><td>", "<!--", "-->", "<script>", "&amp;", "&#", "&nbsp;",
    "第一章 ", "第二章 ", "一、", "（一）", "2.1 ", "1.2.3 ", "中文", "检索", "。", "，", "；", "：", "！", "？", "…", "……",
    "\u200b", "\u200d", "\ufeff", "\u3000", "\u00a0", "\t", " ", "  ", "\r\n", "\n", "\r", "\n\n", "\x00", "\x0b",
    "\x1b", "\x7f", "a", "word", "Word", "e.g.", "3.5", "99", "http://x.y/a_b", "__init__", "$", "{", "}", "\\", "\"",
    "....", "····", "---\ntitle: x\n---\n", "│ ├─ ", "└─", "═", "😀",
)

fragment = st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=6))
hostile_text = st.lists(fragment, max_size=80).map("".join)
# The same pieces repeated into long text (up to about 100 kB), where a super-linear path shows.
long_hostile_text = st.tuples(st.lists(fragment, min_size=1, max_size=12).map("".join), st.integers(1, 4000)).map(
    lambda pair: (pair[0] * pair[1])[:100_000]
)

# Named documents that each broke a page, an editor or a parser once, or could: kept as plain
# cases so every run tries them whatever hypothesis draws.
HOSTILE_DOCUMENTS: dict[str, str] = {
    "lone-pipe": "intro\n\n--mode bm25|vector|hybrid\n\nend\n",
    "full-width-pipes": "参数｜值\n检索｜混合\n\n说明｜只有一行\n",
    "ragged-table": "| a | b | c |\n|---|\n| 1 |\n| 1 | 2 | 3 | 4 | 5 |\n|\n||\n",
    "unclosed-fence": "# Title\n\n```python\ndef f():\n    return '|'\n\n# not a heading\n",
    "crlf-bom": "\ufeff# Title\r\n\r\nText with CRLF.\r\n| a | b |\r\n|---|---|\r\n| 1 | 2 |\r\n",
    "front-matter": "---\ntitle: x\ntags: [a, b]\n---\n# Heading\n\nBody.\n",
    "unclosed-front-matter": "---\ntitle: x\n# Heading\n\nBody.\n",
    "zero-width": "\u200b# \u200bTitle\u200d\n\nzero\u200bwidth\u200bwords\ufeff here.\n",
    "control-characters": "a\x00b\x0bc\x1b[31mred\x1b[0m\x7f\n\n# \x00\n",
    "punctuation": "!@#$%^&*()_+-=[]{};':\",./<>?`~" * 200,
    "broken-html": "<html><body><p>Open <b>bold <i>italic</p><table><tr><td>cell</table><!-- never closed",
    "long-line": "word " * 20_000,
    "long-cjk-line": "检索增强生成系统的混合检索" * 5_000,
    "headings-only": "# a\n" * 5_000,
    "setext-storm": "a\n=\n" * 5_000,
    "list-storm": "- " * 20_000,
    "nested-quotes": "> " * 20_000 + "x",
    "brackets": "[" * 50_000,
    "emphasis": " __a" * 20_000,
    "spaces-then-text": "--" + " " * 50_000 + "x\n",
    "numbered-lines": "".join(f"{i}. item\n" for i in range(1, 5_000)),
    "chinese-numbering": "第一章 总则\n一、范围\n（一）适用\n" * 2_000,
    "box-drawing": "│ ├─ 质量门控(quality_gate.py)\n│ └─ 重排\n" * 2_000,
    "pipe-storm": "|" * 50_000,
    "fence-storm": "```\n" * 10_000,
}


def timed(function: Callable[..., Any], *args: Any, hang_s: float = 60) -> tuple[Any, float]:
    """The function's result and the CPU seconds it took (CPU, so another process's load does
    not count against it). A call still running after `hang_s` is interrupted with
    TimeoutError, so a loop that never ends fails its test instead of hanging the run."""

    def interrupt(signum, frame):
        raise TimeoutError(f"{getattr(function, '__name__', function)} still running after {hang_s} s")

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, hang_s)
    started = time.process_time()
    try:
        result = function(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return result, time.process_time() - started


def cpu_budget(text: str) -> float:
    """The CPU seconds a linear text path may take on `text`: generous for a busy CI machine,
    yet a quadratic path on 100 kB takes tens of seconds and fails it."""
    return 0.5 + 25e-6 * len(text)
