from __future__ import annotations

from django.contrib import admin

from .models import EvaluationRun, GoldenQuestion, GoldenSet, RelevantDocument


@admin.register(GoldenSet)
class GoldenSetAdmin(admin.ModelAdmin):
    list_display = ["name", "kb", "format", "source", "created_at"]
    list_filter = ["format", "kb"]
    search_fields = ["name", "source"]


class RelevantDocumentInline(admin.TabularInline):
    model = RelevantDocument
    extra = 0
    raw_id_fields = ["document"]


@admin.register(GoldenQuestion)
class GoldenQuestionAdmin(admin.ModelAdmin):
    list_display = ["qid", "text", "golden_set", "category", "difficulty", "split"]
    list_filter = ["split", "difficulty", "golden_set"]
    search_fields = ["qid", "text", "category"]
    readonly_fields = ["split"]
    inlines = [RelevantDocumentInline]


@admin.register(EvaluationRun)
class EvaluationRunAdmin(admin.ModelAdmin):
    list_display = ["created_at", "kb", "mode", "split", "questions", "qps"]
    list_filter = ["mode", "kb"]
    readonly_fields = [
        "kb", "golden_set", "mode", "split", "questions", "params", "metrics", "baseline",
        "qps", "latency", "per_question", "created_at",
    ]
