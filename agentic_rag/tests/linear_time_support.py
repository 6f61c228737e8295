"""What the linear-time property tests share: their hypothesis settings, long adversarial texts
and a CPU-time check.

The tests run few examples from a fixed seed, so CI stays fast and repeatable. `make fuzz`
runs them long and random: it loads the "fuzz" profile that the root conftest.py registers,
and `linear_time_settings` then hands every test that profile.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

_QUIET = {
    "deadline": None,  # each test times its own calls, in CPU time, with a bound for the input
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
}
settings.register_profile("linear-time", max_examples=25, derandomize=True, print_blob=True, **_QUIET)


def linear_time_settings(max_examples: int | None = None) -> settings:
    """The "fuzz" profile when it is loaded, else the fixed-seed one (with max_examples if given)."""
    if settings.get_current_profile_name() == "fuzz":
        return settings.get_profile("fuzz")
    chosen = settings.get_profile("linear-time")
    return chosen if max_examples is None else settings(chosen, max_examples=max_examples)


MESSAGE_CHARS = 4000  # the chat's CHAT_MAX_MESSAGE_CHARS default
DOCUMENT_CHARS = 100_000

# Characters that patterns repeat: digits, letters, spaces, Markdown marks, brackets, quotes,
# CJK text and punctuation, and the few pieces a pattern opens with ("**", "](", "<cite").
CHARACTERS = tuple("9aZ _\n\t|`*中文.-#()（），。、_<>\"'=/[]《》!?！？%:：,;~+^×éſ")
PIECES = ("**", "__", "](", "1.", "9 ", "a ", "的", "- ", "| ", "```", "<cite", "[1]", "→", "Stage ", "和", "vs")
units = st.lists(st.sampled_from(CHARACTERS + PIECES), min_size=1, max_size=3).map("".join)


@st.composite
def long_texts(draw: Any, size: int) -> str:
    """A text of `size` characters made of one to three long runs (a piece repeated), with a
    short text around each: the shape that makes a backtracking pattern retry a run."""
    runs = draw(st.lists(st.tuples(st.text(max_size=3), units), min_size=1, max_size=3))
    share = size // len(runs)
    text = "".join(head + unit * (share // len(unit) + 1) for head, unit in runs)[:size - 3]
    return text + draw(st.text(alphabet=st.sampled_from(CHARACTERS), max_size=3))


def cpu_seconds(function: Callable[[str], Any], text: str) -> tuple[Any, float]:
    """function(text) and the CPU time this thread spent on it (time.thread_time). Not the process's
    time: under the full stack another thread of the test process (a database driver's, a
    worker's) once made a 4,000-character message take 0.38 s of process time to rewrite, and
    under 0.25 s the next try. The functions timed here run in the calling thread."""
    started = time.thread_time()
    result = function(text)
    return result, time.thread_time() - started
