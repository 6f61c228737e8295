from __future__ import annotations

from django.contrib import admin, messages

from agentic_rag.admin import ReadableRowsAdmin

from .ingest import request_reingest
from .models import Chunk, Document, DocumentVersion, IngestionJob, KnowledgeBase
from .tasks import enqueue_ingestion


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(ReadableRowsAdmin):
    list_display = ["slug", "name", "owner", "visibility", "content_version", "created_at"]
    list_filter = ["visibility"]
    search_fields = ["slug", "name", "description"]
    filter_horizontal = ["members"]
    readonly_fields = ["content_version", "created_at", "updated_at"]

    def readable_rows(self, rows, user):
        return rows.filter(pk__in=KnowledgeBase.objects.readable_by(user))


class IngestionJobInline(admin.TabularInline):
    model = IngestionJob
    extra = 0
    can_delete = False
    fields = [
        "version", "status", "stage", "percent", "error", "timings_ms", "embedded_chunks", "reused_chunks",
        "started_at", "finished_at",
    ]
    readonly_fields = fields


class DocumentVersionInline(admin.TabularInline):
    model = DocumentVersion
    extra = 0
    can_delete = False
    fields = ["version", "sha256", "size", "created_at", "created_by", "note"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False  # versions are written by submitting a file, never by hand

    def get_queryset(self, request):
        return super().get_queryset(request).defer("data")  # a version's bytes may be megabytes


@admin.register(Document)
class DocumentAdmin(ReadableRowsAdmin):
    kb_path = "kb"
    list_display = ["name", "kb", "status", "version", "live_version", "chunk_count", "size", "updated_at"]
    list_filter = ["status", ("kb", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["name"]
    readonly_fields = [
        "sha256", "size", "mime", "version", "live_version", "status", "progress",
        "char_count", "parent_count", "chunk_count", "created_at", "updated_at", "ingested_at",
        # The running ingestion's claim (knowledge.liveness): a form must never write it back.
        "heartbeat_at", "running_job", "interruptions",
    ]
    inlines = [DocumentVersionInline, IngestionJobInline]
    actions = ["reingest"]

    @admin.action(description="Re-ingest selected documents")
    def reingest(self, request, queryset) -> None:
        for document in queryset:
            request_reingest(document, enqueue=enqueue_ingestion)
        self.message_user(request, f"{queryset.count()} document(s) queued.", messages.SUCCESS)


@admin.register(Chunk)
class ChunkAdmin(ReadableRowsAdmin):
    kb_path = "kb"
    list_display = ["id", "document", "level", "index", "section_index", "section_title", "token_count"]
    list_filter = ["level", ("kb", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["text", "section_title", "document__name"]
    raw_id_fields = ["document", "parent"]
    readonly_fields = ["sha256", "version"]
