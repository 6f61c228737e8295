"""The chat pipeline: 8 stages declared as a graph, run synchronously or streamed from a thread."""

from __future__ import annotations

from .graph import CHAT_GRAPH, export_graph
from .options import ChatOptions, ChatRefused, ChatRequest, ChatResult, StageStatus, StageTiming
from .results import fold_events
from .runner import run_chat
from .streaming import aiter_chat, iter_chat

__all__ = [
    "CHAT_GRAPH",
    "ChatOptions",
    "ChatRefused",
    "ChatRequest",
    "ChatResult",
    "StageStatus",
    "StageTiming",
    "aiter_chat",
    "export_graph",
    "fold_events",
    "iter_chat",
    "run_chat",
]
