"""Demo providers over fixture files: weather, sales and tickets. Every answer says it is demo data.

They are off unless `CHAT_DEMO_TOOLS` turns them on, and even then each answers only for what
its fixture holds (a listed city, quarter, ticket or ticket status): any other question goes
to the knowledge base, never to made-up figures.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from django.conf import settings

FIXTURES = Path(__file__).resolve().parent / "fixtures"
DEMO = "[Demo data · 演示数据]"


@cache
def load_fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def is_on() -> bool:
    """Whether the demo tools are offered (read on each use, so tests and admins can switch it)."""
    return bool(settings.CHAT_DEMO_TOOLS)


# --- weather ---------------------------------------------------------------------------------


def extract_weather(message: str) -> dict[str, Any] | None:
    """The fixture city the message names; None for any other place or none, so that the
    question goes to the knowledge base (it once got Beijing's demo weather for Toronto)."""
    lowered = message.lower()
    cities = load_fixture("weather.json")["cities"]
    found = [city for city, row in cities.items() if any(name in lowered for name in row["names"])]
    return {"city": found[0]} if found else None


def handle_weather(parameters: dict[str, Any]) -> str:
    data = load_fixture("weather.json")
    city = str(parameters.get("city", ""))
    row = data["cities"].get(city)
    if row is None:
        return f"{DEMO} No demo weather for {city!r}; known cities: {', '.join(data['cities'])}."
    return (
        f"{DEMO} {city}: {row['condition']} ({row['condition_zh']}), {row['temp_c']} °C, "
        f"humidity {row['humidity']}%, wind {row['wind']}. {data['note']}"
    )


# --- sales -----------------------------------------------------------------------------------

# "\s*(?:-\s*)?", not "\s*-?\s*": two runs of spaces side by side split a long run every way.
_QUARTER = re.compile(r"\b(20\d\d)?\s*+(?:-\s*+)?Q([1-4])\b|第([一二三四1-4])季度", re.IGNORECASE)
_ZH_DIGITS = {"一": "1", "二": "2", "三": "3", "四": "4"}


def extract_sales(message: str) -> dict[str, Any] | None:
    """The fixture quarter the message names ("Q1" is 2024's); None for another quarter or none,
    so that the question goes to the knowledge base instead of the demo table."""
    match = _QUARTER.search(message)
    if not match:
        return None
    year = match.group(1) or "2024"
    number = match.group(2) or _ZH_DIGITS.get(match.group(3), match.group(3))
    quarter = f"{year}-Q{number}"
    return {"quarter": quarter} if quarter in load_fixture("sales.json")["quarters"] else None


def handle_sales(parameters: dict[str, Any]) -> str:
    data = load_fixture("sales.json")
    quarters = data["quarters"]
    wanted = str(parameters.get("quarter") or "")
    chosen = [wanted] if wanted in quarters else list(quarters)
    lines = [
        f"{quarter}: total {sum(regions.values()):,} {data['currency']} ("
        + ", ".join(f"{region} {amount:,}" for region, amount in regions.items()) + ")"
        for quarter, regions in ((q, quarters[q]) for q in chosen)
    ]
    missing = f" No demo figures for {wanted}." if wanted and wanted not in quarters else ""
    return f"{DEMO} Sales{missing}\n" + "\n".join(lines) + f"\n{data['note']}"


# --- tickets ---------------------------------------------------------------------------------

_TICKET = re.compile(r"\bTKT-\d+\b", re.IGNORECASE)
_STATUS = re.compile(r"\b(open|resolved|in progress)\b|未解决|已解决|处理中", re.IGNORECASE)
_ZH_STATUS = {"未解决": "open", "已解决": "resolved", "处理中": "in progress"}


def extract_ticket(message: str) -> dict[str, Any] | None:
    """The fixture ticket the message names, else the ticket status it asks about; None when it
    names neither or an unknown ticket, so "how are tickets escalated?" goes to the knowledge base."""
    tickets = load_fixture("tickets.json")["tickets"]
    ticket = _TICKET.search(message)
    if ticket:
        return {"id": ticket.group(0).upper(), "status": ""} if ticket.group(0).upper() in tickets else None
    status = _STATUS.search(message)
    found = _ZH_STATUS.get(status.group(0), status.group(0).lower()) if status else ""
    return {"id": "", "status": found} if found else None


def handle_ticket(parameters: dict[str, Any]) -> str:
    data = load_fixture("tickets.json")
    tickets = data["tickets"]
    wanted, status = str(parameters.get("id") or ""), str(parameters.get("status") or "")
    if wanted:
        rows = {wanted: tickets[wanted]} if wanted in tickets else {}
    else:
        rows = {k: v for k, v in tickets.items() if not status or v["status"] == status}
    if not rows:
        return f"{DEMO} No demo ticket matches {wanted or status!r}."
    lines = [f"{key} [{t['status']}, {t['priority']}] {t['title']} (assignee {t['assignee']}, updated {t['updated']})"
             for key, t in rows.items()]
    return f"{DEMO} Tickets\n" + "\n".join(lines) + f"\n{data['note']}"
