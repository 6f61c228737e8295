"""Property-based tests (hypothesis) for the parsers: any bytes under any supported name give
sections or a clear ParseError, and text that parses keeps every word it had."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge.parsing import parse_document
from knowledge.parsing.document import ParseError

# At least 200 examples; more under `make fuzz` (its profile sets the default).
FAST = settings(max_examples=max(200, settings.default.max_examples), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(st.binary(max_size=2000), st.sampled_from(["a.txt", "a.md", "a.html", "a.pdf", "a.docx"]))
def test_any_bytes_give_sections_or_a_clear_error(data, name):
    try:
        parsed = parse_document(name, data)
    except ParseError as error:
        assert str(error).strip()
    else:
        assert all(isinstance(section.text, str) for section in parsed.sections)


lines = st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=60), min_size=1, max_size=20)


@FAST
@given(lines, st.sampled_from(["notes.txt", "notes.md"]))
def test_no_word_of_a_text_file_is_lost(text_lines, name):
    text = "\n".join(text_lines)
    try:
        parsed = parse_document(name, text.encode("utf-8"))
    except ParseError:
        assert not re.search(r"\w", text)  # only a file without words may be refused
        return
    # A heading's number is kept as its section's index ("0 A" is section "0", titled "A").
    kept = " ".join(f"{section.index} {section.title} {section.text}" for section in parsed.sections)
    for word in re.findall(r"[^\W_]+", text):
        assert word in kept, (word, text)
