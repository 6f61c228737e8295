"""Feedback on answers: one verdict per user and message, from the chat page or the API."""

from __future__ import annotations

from typing import Any

from .models import Feedback, Message


def record_feedback(
    user: Any, message: Message, *, is_positive: bool, comment: str = "", agent_type: str = "",
    metadata: dict | None = None,
) -> Feedback:
    """Store (or replace) the user's verdict on an assistant message, with its question and trace."""
    debug = message.debug if isinstance(message.debug, dict) else {}
    defaults = {
        "is_positive": is_positive,
        "comment": comment,
        "trace": message.trace,
        "query": message.trace.question if message.trace else _question_before(message),
        "agent_type": agent_type or str(debug.get("agent_type") or debug.get("worker_name") or ""),
        "metadata": metadata or {},
    }
    feedback, _ = Feedback.objects.update_or_create(user=user, message=message, defaults=defaults)
    return feedback


def _question_before(message: Message) -> str:
    question = (
        Message.objects.filter(conversation_id=message.conversation_id, role="user", pk__lt=message.pk)
        .order_by("-pk")
        .values_list("content", flat=True)
        .first()
    )
    return question or ""
