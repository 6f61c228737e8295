from __future__ import annotations

from django.contrib import admin

from agentic_rag.admin import ReadableRowsAdmin

from .models import Conversation, CurrencyRate, DocumentProposal, Feedback, Message, Span, Trace


class MessageInline(admin.TabularInline):
    model = Message
    extra = 0
    fields = ["role", "content", "partial", "trace", "created_at"]
    readonly_fields = fields
    can_delete = False
    show_change_link = True


@admin.register(Conversation)
class ConversationAdmin(ReadableRowsAdmin):
    owner_path = "user"
    list_display = ["title", "session_id", "user", "kb", "updated_at"]
    list_filter = [("kb", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["title", "session_id", "user__username"]
    raw_id_fields = ["user", "kb"]
    readonly_fields = ["created_at", "updated_at"]
    inlines = [MessageInline]


@admin.register(Message)
class MessageAdmin(ReadableRowsAdmin):
    owner_path = "conversation__user"
    list_display = ["id", "conversation", "role", "partial", "created_at"]
    list_filter = ["role", "partial"]
    search_fields = ["content"]
    raw_id_fields = ["conversation", "trace"]
    readonly_fields = ["created_at"]


class ReadOnlyMixin:
    """Viewable, never edited: traces record what happened (deleting old ones is allowed)."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class SpanInline(ReadOnlyMixin, admin.TabularInline):
    model = Span
    extra = 0
    can_delete = False
    fields = ["name", "kind", "start_ms", "ms", "status", "error", "input", "output"]
    readonly_fields = fields


@admin.register(Trace)
class TraceAdmin(ReadOnlyMixin, ReadableRowsAdmin):
    owner_path = "user"
    list_display = ["trace_id", "user", "question", "route", "intent", "shortcut", "status", "total_ms", "created_at"]
    list_filter = ["status", "shortcut", "route"]
    search_fields = ["trace_id", "question", "user__username"]
    inlines = [SpanInline]


@admin.register(Span)
class SpanAdmin(ReadOnlyMixin, ReadableRowsAdmin):
    owner_path = "trace__user"
    list_display = ["name", "kind", "trace", "start_ms", "ms", "status"]
    list_filter = ["kind", "status"]
    search_fields = ["name", "trace__trace_id"]
    raw_id_fields = ["trace"]


@admin.register(Feedback)
class FeedbackAdmin(ReadableRowsAdmin):
    owner_path = "user"
    list_display = ["id", "user", "is_positive", "agent_type", "query", "message", "trace", "created"]
    list_filter = ["is_positive", "agent_type"]
    search_fields = ["query", "comment", "user__username"]
    raw_id_fields = ["user", "message", "trace"]
    readonly_fields = ["created"]


@admin.register(CurrencyRate)
class CurrencyRateAdmin(admin.ModelAdmin):
    list_display = ["code", "per_usd", "as_of", "source"]
    list_filter = ["as_of"]
    search_fields = ["code"]


@admin.register(DocumentProposal)
class DocumentProposalAdmin(ReadOnlyMixin, ReadableRowsAdmin):
    """Rewrites proposed in document chat, with the verdict and the version an accept made."""

    owner_path = "user"
    list_display = ["id", "document", "section_position", "operation", "status", "offline", "user", "created_at"]
    list_filter = ["status", "operation", "offline"]
    search_fields = ["document__name", "user__username", "change_summary"]
    readonly_fields = [f.name for f in DocumentProposal._meta.fields]
