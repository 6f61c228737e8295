"""Conversations and their messages, and the trace of every chat request with its spans."""

from __future__ import annotations

import uuid
from functools import cached_property

from django.conf import settings
from django.db import models

from agentic_rag.vectors import EmbeddingField


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

    @cached_property
    def feedback_value(self) -> str:
        """ "up", "down" or "" for the newest verdict on this message (its owner's: only they see it)."""
        latest = self.feedback.order_by("-created", "-id").first()
        return "" if latest is None else ("up" if latest.is_positive else "down")


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


class ConversationSummary(models.Model):
    """The rolling summary of a conversation's oldest turns."""

    conversation = models.OneToOneField(Conversation, models.CASCADE, related_name="summary")
    text = models.TextField(blank=True)
    # The newest message the summary covers; later messages load verbatim.
    until_message_id = models.BigIntegerField(default=0)
    turns = models.PositiveIntegerField(default=0, help_text="Exchanges summarised so far.")
    method = models.CharField(max_length=16, default="extractive")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"summary of {self.conversation_id} ({self.turns} turns)"


class MemoryEntryQuerySet(models.QuerySet):
    def for_user(self, user) -> MemoryEntryQuerySet:
        if not user.is_authenticated:
            return self.none()
        return self.filter(user=user)


class MemoryEntry(models.Model):
    """One past exchange of a user, embedded so that later questions can recall it."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="chat_memories")
    message = models.OneToOneField(Message, models.CASCADE, related_name="memory", help_text="The answer.")
    question = models.TextField()
    answer = models.TextField()
    embedder = models.CharField(max_length=100)
    embedding = EmbeddingField()
    created_at = models.DateTimeField(auto_now_add=True)

    objects = MemoryEntryQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "embedder"])]

    def __str__(self) -> str:
        return self.question[:60]


class CurrencyRateQuerySet(models.QuerySet):
    def latest_table(self) -> dict[str, CurrencyRate]:
        """The newest rate of each currency, by code."""
        table: dict[str, CurrencyRate] = {}
        for rate in self.order_by("code", "-as_of"):
            table.setdefault(rate.code, rate)
        return table


class CurrencyRate(models.Model):
    """How many units of `code` one US dollar buys on `as_of`, and where the figure came from."""

    code = models.CharField(max_length=3)
    per_usd = models.DecimalField(max_digits=20, decimal_places=8)
    as_of = models.DateField()
    source = models.CharField(max_length=200, blank=True)

    objects = CurrencyRateQuerySet.as_manager()

    class Meta:
        ordering = ["code", "-as_of"]
        constraints = [models.UniqueConstraint(fields=["code", "as_of"], name="chat_currencyrate_code_date")]

    def __str__(self) -> str:
        return f"1 USD = {self.per_usd} {self.code} ({self.as_of})"


class Feedback(models.Model):
    """A user's verdict on one answer, with what was asked and which agent answered."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="chat_feedback")
    message = models.ForeignKey(Message, models.CASCADE, related_name="feedback")
    trace = models.ForeignKey(Trace, models.SET_NULL, null=True, blank=True, related_name="feedback")
    is_positive = models.BooleanField()
    comment = models.TextField(blank=True)
    query = models.TextField(blank=True)
    agent_type = models.CharField(max_length=64, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"{'👍' if self.is_positive else '👎'} {self.user} on message {self.message_id}"


class DocumentChatTurn(models.Model):
    """One request of document chat: the question or instruction about a section and its outcome."""

    conversation_id = models.CharField(max_length=64, db_index=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="document_chat_turns")
    document = models.ForeignKey("knowledge.Document", models.CASCADE, null=True, blank=True, related_name="+")
    section_index = models.CharField(max_length=32, blank=True)
    section_title = models.CharField(max_length=500, blank=True)
    message = models.TextField()
    intent = models.CharField(max_length=32, blank=True)
    response_type = models.CharField(max_length=16, blank=True)
    reply = models.TextField(blank=True, help_text="The answer, or the proposal's change summary.")
    # What the page shows beside the reply: {references, warnings, offline, retrieval_status}.
    details = models.JSONField(default=dict, blank=True)
    trace = models.ForeignKey(Trace, models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.intent or 'turn'}: {self.message[:60]}"


class ProposalStatus(models.TextChoices):
    PROPOSED = "proposed"
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    CONFLICT = "conflict", "conflict (the document changed)"


class DocumentProposal(models.Model):
    """A rewrite of one section, proposed by document chat, waiting for the user's verdict.

    `base_sha256` is the document's content when the proposal was made: accepting it after
    the document changed would overwrite someone's edit, so it is refused as a conflict and
    the proposal is kept for the user to copy or regenerate.
    """

    turn = models.OneToOneField(DocumentChatTurn, models.CASCADE, related_name="proposal")
    document = models.ForeignKey("knowledge.Document", models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="+")
    section_position = models.PositiveIntegerField()
    base_sha256 = models.CharField(max_length=64)
    original_content = models.TextField()
    proposed_content = models.TextField()
    change_summary = models.TextField(blank=True)
    operation = models.CharField(max_length=16, blank=True, help_text="condense, expand, polish, rewrite…")
    warnings = models.JSONField(default=list, blank=True)
    offline = models.BooleanField(default=False, help_text="Made by rules, without a language model.")
    status = models.CharField(max_length=16, choices=ProposalStatus.choices, default=ProposalStatus.PROPOSED)
    accepted_version = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"proposal {self.pk} for {self.document_id} §{self.section_position}: {self.status}"


class UserFactQuerySet(models.QuerySet):
    def for_user(self, user) -> UserFactQuerySet:
        if not user.is_authenticated:
            return self.none()
        return self.filter(user=user)


class UserFact(models.Model):
    """A lasting fact a user stated about themselves or their work: semantic memory.

    `key` (subject|relation|topic) is unique per user, so the same fact stated again updates
    its row and a newer one about the same thing ("we moved to PostgreSQL 16") replaces it.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="chat_facts")
    text = models.CharField(max_length=300, help_text="The fact in the user's words.")
    key = models.CharField(max_length=200)
    category = models.CharField(max_length=40, blank=True, help_text="database, platform, role…")
    # The words a question about the fact would share with it (both languages), for recall.
    terms = models.JSONField(default=list, blank=True)
    method = models.CharField(max_length=16, default="rules", help_text="rules or llm")
    source_message = models.ForeignKey(
        Message, models.SET_NULL, null=True, blank=True, related_name="stated_facts", help_text="Where it was stated."
    )
    replaced = models.CharField(max_length=300, blank=True, help_text="The earlier fact this one replaced.")
    times_stated = models.PositiveIntegerField(default=1)
    embedder = models.CharField(max_length=100, blank=True)
    embedding = EmbeddingField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = UserFactQuerySet.as_manager()

    class Meta:
        ordering = ["-updated_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="chat_userfact_user_key")]

    def __str__(self) -> str:
        return self.text[:60]
