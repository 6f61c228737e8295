"""Generated Markdown reports of evaluation figures: the date, the commit, the command, the tables.

Figures live in these generated files (under var/ by default), never in docs/.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand


@dataclass(frozen=True)
class Table:
    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def current_commit(directory: Path | None = None) -> str:
    """The checked-out commit, "-dirty" when the working tree has changes; "unknown" outside git."""
    try:
        described = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=directory or settings.BASE_DIR,
            capture_output=True, text=True, timeout=10, check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return described.stdout.strip() or "unknown"


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command as typed: `manage.py` and its arguments."""
    args = list(sys.argv if argv is None else argv)
    if args:
        args[0] = Path(args[0]).name
    return shlex.join(args)


# Options every management command has; they say nothing about what was measured.
_BASE_OPTIONS = frozenset({"verbosity", "settings", "pythonpath", "traceback", "no_color", "force_color", "skip_checks"})


def invoked_as(name: str, options: Mapping[str, Any], flags: Mapping[str, str], argv: Sequence[str] | None = None) -> str:
    """The management command `name` as typed, or, when it was called from code (a test, a
    script: sys.argv is theirs), as it would be typed with the options it was given. `flags`
    maps an option's dest to the flag that sets it."""
    args = list(sys.argv if argv is None else argv)
    if args[1:2] == [name]:
        return command_line(args)
    words = ["manage.py", name]
    for key, value in options.items():
        if key in _BASE_OPTIONS or key not in flags or value in (None, False, "", [], ()):
            continue
        values = value if isinstance(value, list | tuple) else [value]
        words += [flags[key]] if value is True else [part for item in values for part in (flags[key], str(item))]
    return shlex.join(words)


def option_flags(command: BaseCommand, name: str) -> dict[str, str]:
    """Each option's dest and its first flag, from the command's own parser."""
    parser = command.create_parser("manage.py", name)
    return {action.dest: action.option_strings[0] for action in parser._actions if action.option_strings}


def default_report_path(name: str, now: datetime | None = None) -> Path:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return Path(settings.VAR_DIR) / "reports" / f"{name}-{stamp}.md"


def render_report(title: str, tables: Sequence[Table], *, command: str, commit: str, when: datetime,
                  notes: Sequence[str] = ()) -> str:
    lines = [
        f"# {title}", "",
        f"- date: {when.strftime('%Y-%m-%d %H:%M:%S UTC')}",
        f"- commit: `{commit}`",
        f"- command: `{command}`", "",
    ]
    for note in notes:
        lines.append(note)
    if notes:
        lines.append("")
    for table in tables:
        lines += [f"## {table.title}", "", _row(table.header), _row(("---",) * len(table.header))]
        lines += [_row(row) for row in table.rows]
        lines.append("")
    return "\n".join(lines)


def write_report(path: Path, title: str, tables: Sequence[Table], *, command: str | None = None,
                 notes: Sequence[str] = ()) -> Path:
    """Write the report to path (its folder created) and return the path."""
    text = render_report(title, tables, command=command or command_line(), commit=current_commit(),
                         when=datetime.now(UTC), notes=notes)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def answer_table(title: str, evaluation) -> Table:
    """An answer evaluation's rates, each with how many it is taken over (questions; citations for
    citation_valid), and latency."""
    from .answers import metric_counts

    counts = metric_counts(evaluation.outcomes)
    rows = [(metric, _figure(value), str(counts.get(metric, ""))) for metric, value in evaluation.metrics.items()]
    rows += [(f"{key} ms", f"{evaluation.latency_ms[key]:.1f}", str(len(evaluation.outcomes))) for key in ("p50", "p95")]
    return Table(title, ("metric", "value", "n"), tuple(rows))


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"
