"""Conversations and their messages, and the trace of every chat request with its spans."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class ConversationQuerySet(models.QuerySet):
    def for_user(self, user) -> ConversationQuerySet:
        if not user.is_authenticated:
            return self.none()
        return self.filter(user=user)


class Conversation(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="conversations")
    session_id = models.CharField(max_length=64)
    title = models.CharField(max_length=200, blank=True)
    kb = models.ForeignKey(
        "knowledge.KnowledgeBase", models.SET_NULL, null=True, blank=True, related_name="conversations"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ConversationQuerySet.as_manager()

    class Meta:
        ordering = ["-updated_at"]
        constraints = [
            models.UniqueConstraint(fields=["user", "session_id"], name="chat_conversation_user_session")
        ]

    def __str__(self) -> str:
        return self.title or self.session_id


class Role(models.TextChoices):
    USER = "user"
    ASSISTANT = "assistant"


class Message(models.Model):
    conversation = models.ForeignKey(Conversation, models.CASCADE, related_name="messages")
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField(blank=True)
    # [{n, source, doc, doc_id, chunk_id, section, quote, verified}] for an assistant answer.
    citations = models.JSONField(default=list, blank=True)
    # Intent, route, shortcut, evidence and verification, for the evidence panel and retry.
    debug = models.JSONField(default=dict, blank=True)
    trace = models.ForeignKey("Trace", models.SET_NULL, null=True, blank=True, related_name="messages")
    partial = models.BooleanField(default=False, help_text="The stream was cut before the answer ended.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:60]}"


class Shortcut(models.TextChoices):
    NONE = "", "none"
    A = "A", "A: clarifying question"
    B = "B", "B: system answer"
    C = "C", "C: no evidence"


class TraceStatus(models.TextChoices):
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class TraceQuerySet(models.QuerySet):
    def for_user(self, user) -> TraceQuerySet:
        if not user.is_authenticated:
            return self.none()
        return self.filter(user=user)


class Trace(models.Model):
    trace_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="chat_traces")
    conversation = models.ForeignKey(
        Conversation, models.SET_NULL, null=True, blank=True, related_name="traces"
    )
    question = models.TextField()
    route = models.CharField(max_length=100, blank=True, help_text="The KB searched, empty for none.")
    intent = models.CharField(max_length=100, blank=True)
    shortcut = models.CharField(max_length=1, choices=Shortcut.choices, blank=True, default="")
    status = models.CharField(max_length=16, choices=TraceStatus.choices, default=TraceStatus.DONE)
    error = models.TextField(blank=True)
    total_ms = models.FloatField(default=0.0)
    first_token_ms = models.FloatField(null=True, blank=True)
    # One entry per cited sentence: does its quote occur in the cited source?
    verification = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TraceQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return str(self.trace_id)


class SpanKind(models.TextChoices):
    STAGE = "stage"
    RETRIEVAL = "retrieval"
    LLM = "llm"
    TOOL = "tool"


class Span(models.Model):
    trace = models.ForeignKey(Trace, models.CASCADE, related_name="spans")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=SpanKind.choices, default=SpanKind.STAGE)
    start_ms = models.FloatField(default=0.0, help_text="Offset from the start of the trace.")
    ms = models.FloatField(default=0.0)
    input = models.TextField(blank=True)
    output = models.TextField(blank=True)
    status = models.CharField(max_length=16, default="ok")
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["start_ms", "id"]

    def __str__(self) -> str:
        return f"{self.name} {self.ms:.1f} ms"

    @property
    def end_ms(self) -> float:
        return self.start_ms + self.ms
