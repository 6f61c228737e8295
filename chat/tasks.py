"""Background work of the chat app: conversation summaries, episodic memories and stated facts."""

from __future__ import annotations

from celery import shared_task

from agentic_rag.llm import get_llm

from . import facts, memory
from .models import Conversation, Message


@shared_task
def summarise_conversation(conversation_id: int) -> int:
    """Fold a long conversation's oldest turns into its summary; return the turns summarised."""
    conversation = Conversation.objects.filter(pk=conversation_id).first()
    if conversation is None:
        return 0
    summary = memory.summarise_conversation(conversation, llm=get_llm())
    return summary.turns if summary else 0


@shared_task
def remember_exchange(answer_id: int) -> bool:
    """Embed one answered exchange for episodic recall (safe to run twice)."""
    answer = Message.objects.select_related("conversation").filter(pk=answer_id).first()
    return answer is not None and memory.remember_exchange(answer) is not None


@shared_task
def remember_facts(answer_id: int) -> int:
    """Keep the lasting facts the question before this answer states; return how many (safe to run twice)."""
    answer = Message.objects.select_related("conversation").filter(pk=answer_id).first()
    return 0 if answer is None else len(facts.remember_facts(answer, llm=get_llm()))
