"""Stage cards of the chat page: the exported pipeline graph laid out as lanes, and the
state each pipeline event puts a card in."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

# stage_end statuses the page knows; anything else shows as done.
STATES = {"idle", "running", "done", "skipped", "failed", "shortcut"}


@dataclass(frozen=True)
class StageCard:
    id: str
    label: str
    number: int
    state: str = "idle"
    ms: float | None = None
    shortcut: str = ""
    detail: str = ""


def stage_lanes(graph: Mapping[str, Any]) -> list[list[StageCard]]:
    """Number the graph's nodes and group neighbours of one parallel_group into a lane."""
    lanes: list[list[StageCard]] = []
    previous_group = None
    for number, node in enumerate(graph.get("nodes", []), start=1):
        card = StageCard(id=str(node["id"]), label=str(node.get("label") or node["id"]), number=number)
        group = node.get("parallel_group")
        if group and group == previous_group:
            lanes[-1].append(card)
        else:
            lanes.append([card])
        previous_group = group
    return lanes


def cards_by_id(lanes: Iterable[list[StageCard]]) -> dict[str, StageCard]:
    return {card.id: card for lane in lanes for card in lane}


def card_started(card: StageCard) -> StageCard:
    return replace(card, state="running", ms=None, shortcut="", detail="")


def card_ended(card: StageCard, ms: float, data: Mapping[str, Any]) -> StageCard:
    """Return the card as a stage_end event with this data leaves it."""
    status = str(data.get("status") or "done")
    state = status if status in STATES else "done"
    return replace(
        card,
        state=state,
        ms=ms,
        shortcut=str(data.get("shortcut") or "") if state == "shortcut" else "",
        detail=str(data.get("detail") or ""),
    )
