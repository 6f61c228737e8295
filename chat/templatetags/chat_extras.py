"""Template filters of the chat pages: answers as sanitised HTML, evidence, timings."""

from __future__ import annotations

from django import template

from chat.evidence import message_agent_steps, message_evidence, message_verification
from chat.rendering import render_markdown

register = template.Library()


@register.filter
def evidence_key(message) -> str:
    """Name a stored message's evidence list; a streaming turn uses its own key until final."""
    return f"m{message.pk}"


@register.filter
def answer_html(message):
    """Render an assistant message; its `[n]` link the message's own evidence items."""
    numbers = {item.n for item in message_evidence(message)}
    return render_markdown(message.content, evidence_key=evidence_key(message), numbers=numbers)


@register.filter
def markdown(text: str):
    return render_markdown(text)


@register.filter
def evidence(message):
    return message_evidence(message)


@register.filter
def agent_steps(message):
    return message_agent_steps(message)


@register.filter
def verification(message):
    return message_verification(message)


@register.filter
def ms(value) -> str:
    """Format milliseconds: 0.4 ms, 38 ms, 1.2 s."""
    if value in (None, ""):
        return ""
    value = float(value)
    if value < 10:
        return f"{value:.1f} ms"
    if value < 1000:
        return f"{value:.0f} ms"
    return f"{value / 1000:.2f} s"
