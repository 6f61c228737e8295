"""Decode uploaded bytes to text: BOMs, UTF-8, then legacy Chinese encodings by likelihood."""

from __future__ import annotations

import codecs
import re

from .document import ParseError

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),  # before UTF-16 LE, whose BOM is its prefix
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_CONTROL_BYTES = bytes(b for b in range(32) if b not in b"\t\n\r\f\v\x1b")
# Wrongly decoded Chinese shows up as kana, bopomofo, Greek, box drawing or private-use code
# points; correctly decoded text has almost none of them.
_ODD_CHARS = re.compile(
    r"[^\x00-\x7f\u00a0-\u00ff\u2000-\u24ff\u3000-\u303f\u3200-\u33ff\u4e00-\u9fff\uff00-\uffef]"
)


def decode_text(data: bytes) -> str:
    """Decode text bytes of unknown encoding, preferring UTF-8, then GB18030 or Big5."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data[len(bom) :].decode(encoding, errors="replace")
    if _is_binary(data):
        raise ParseError("binary content, not a text file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return _decode_legacy_chinese(data)


def _is_binary(data: bytes) -> bool:
    if b"\x00" in data:
        return True
    sample = data[:8192]
    control = len(sample) - len(sample.translate(None, _CONTROL_BYTES))
    return control > len(sample) * 0.05


def _decode_legacy_chinese(data: bytes) -> str:
    simplified = _try_decode(data, "gb18030")
    traditional = _try_decode(data, "big5") or _try_decode(data, "cp950")
    if simplified is None or traditional is None:
        return simplified or traditional or _decode_best_guess(data)
    # Big5 bytes nearly always decode as GB18030 too, so "it decodes" decides nothing.
    odd_simplified, odd_traditional = _odd_count(simplified), _odd_count(traditional)
    if odd_simplified != odd_traditional:
        return simplified if odd_simplified < odd_traditional else traditional
    return traditional if _is_big5_guess(data) else simplified


def _try_decode(data: bytes, encoding: str) -> str | None:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError:
        return None


def _odd_count(text: str) -> int:
    return len(_ODD_CHARS.findall(text))


def _is_big5_guess(data: bytes) -> bool:
    """Ask charset-normalizer to settle short texts that both decodings read cleanly."""
    from charset_normalizer import from_bytes

    best = from_bytes(data, cp_isolation=["gb18030", "big5"]).best()
    return best is not None and best.encoding in ("big5", "cp950")


def _decode_best_guess(data: bytes) -> str:
    from charset_normalizer import from_bytes

    best = from_bytes(data).best()
    return str(best) if best is not None else data.decode("utf-8", errors="replace")
