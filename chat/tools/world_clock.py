"""The datetime tool: the current date and time in the time zones a question names."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

Clock = Callable[[], datetime]

# Place names people write, in Chinese and English, and the zone each one means.
PLACES: dict[str, str] = {
    "北京": "Asia/Shanghai", "上海": "Asia/Shanghai", "中国": "Asia/Shanghai", "深圳": "Asia/Shanghai",
    "广州": "Asia/Shanghai", "香港": "Asia/Hong_Kong", "台北": "Asia/Taipei", "东京": "Asia/Tokyo",
    "日本": "Asia/Tokyo", "首尔": "Asia/Seoul", "新加坡": "Asia/Singapore", "纽约": "America/New_York",
    "洛杉矶": "America/Los_Angeles", "旧金山": "America/Los_Angeles", "伦敦": "Europe/London",
    "巴黎": "Europe/Paris", "柏林": "Europe/Berlin", "莫斯科": "Europe/Moscow", "悉尼": "Australia/Sydney",
    "迪拜": "Asia/Dubai", "印度": "Asia/Kolkata",
    "beijing": "Asia/Shanghai", "shanghai": "Asia/Shanghai", "china": "Asia/Shanghai",
    "hong kong": "Asia/Hong_Kong", "taipei": "Asia/Taipei", "tokyo": "Asia/Tokyo", "japan": "Asia/Tokyo",
    "seoul": "Asia/Seoul", "singapore": "Asia/Singapore", "new york": "America/New_York", "nyc": "America/New_York",
    "los angeles": "America/Los_Angeles", "san francisco": "America/Los_Angeles", "chicago": "America/Chicago",
    "london": "Europe/London", "paris": "Europe/Paris", "berlin": "Europe/Berlin", "moscow": "Europe/Moscow",
    "sydney": "Australia/Sydney", "dubai": "Asia/Dubai", "india": "Asia/Kolkata", "utc": "UTC", "gmt": "UTC",
}
_PLACE = re.compile(
    "|".join(re.escape(name) if not name.isascii() else rf"\b{re.escape(name)}\b"
             for name in sorted(PLACES, key=len, reverse=True)),
    re.IGNORECASE,
)
_IANA = re.compile(r"\b[A-Z][a-z]+/[A-Za-z_]+(?:/[A-Za-z_]+)?\b")


def zones_in(message: str) -> list[str]:
    """The IANA zones a message names, in order, each once."""
    found = [PLACES[m.group(0).lower()] if m.group(0).isascii() else PLACES[m.group(0)] for m in _PLACE.finditer(message)]
    found += [m.group(0) for m in _IANA.finditer(message) if m.group(0) in available_timezones()]
    return list(dict.fromkeys(found))


def extract(message: str) -> dict[str, Any]:
    """Every time question is answerable: the zones named, or the server's own."""
    return {"zones": zones_in(message)}


def make_handler(clock: Clock = lambda: datetime.now(UTC), default_zone: str = "UTC") -> Callable[[dict], str]:
    """A handler reading the time from `clock` (a parameter, so tests fix it)."""

    def handle(parameters: dict[str, Any]) -> str:
        now = clock()
        lines = []
        for name in parameters.get("zones") or [default_zone]:
            try:
                local = now.astimezone(ZoneInfo(str(name)))
            except (ZoneInfoNotFoundError, ValueError):
                lines.append(f"{name}: unknown time zone · 未知时区")
                continue
            lines.append(f"Current time · 当前时间 {name}: {local:%Y-%m-%d %H:%M:%S} ({local:%A}, UTC{local:%z})")
        return "\n".join(lines)

    return handle


PARAMETERS = {
    "type": "object",
    "properties": {"zones": {"type": "array", "items": {"type": "string"}, "description": "IANA zone names"}},
}
