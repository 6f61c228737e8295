from __future__ import annotations

from django.contrib import admin

from agentic_rag.admin import ReadableRowsAdmin

from .models import EvaluationRun, GoldenQuestion, GoldenSet, RelevantDocument


@admin.register(GoldenSet)
class GoldenSetAdmin(ReadableRowsAdmin):
    kb_path = "kb"
    list_display = ["name", "kb", "format", "source", "created_at"]
    list_filter = ["format", ("kb", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["name", "source"]


class RelevantDocumentInline(admin.TabularInline):
    model = RelevantDocument
    extra = 0
    raw_id_fields = ["document"]


@admin.register(GoldenQuestion)
class GoldenQuestionAdmin(ReadableRowsAdmin):
    kb_path = "golden_set__kb"
    list_display = ["qid", "text", "golden_set", "category", "difficulty", "split"]
    list_filter = ["split", "difficulty", ("golden_set", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["qid", "text", "category"]
    readonly_fields = ["split"]
    inlines = [RelevantDocumentInline]


@admin.register(EvaluationRun)
class EvaluationRunAdmin(ReadableRowsAdmin):
    kb_path = "kb"
    list_display = ["created_at", "kb", "mode", "split", "questions", "qps"]
    list_filter = ["mode", ("kb", admin.RelatedOnlyFieldListFilter)]
    readonly_fields = [
        "kb", "golden_set", "mode", "split", "questions", "params", "metrics", "baseline",
        "qps", "latency", "per_question", "created_at",
    ]
