from __future__ import annotations

from django.contrib import admin

from agentic_rag.admin import ReadableRowsAdmin

from .models import Community, Entity, GraphBuild, Mention, Relation


class MentionInline(admin.TabularInline):
    model = Mention
    extra = 0
    fields = ["chunk", "document", "surface", "count"]
    readonly_fields = fields
    raw_id_fields = ["chunk"]
    max_num = 0  # mentions come from builds, not from hand edits


@admin.register(Entity)
class EntityAdmin(ReadableRowsAdmin):
    kb_path = "kb"
    list_display = ["name", "type", "kb", "mention_count", "community"]
    list_filter = ["type", ("kb", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["name", "key", "aliases"]
    readonly_fields = ["key", "mention_count", "embedding", "community"]
    inlines = [MentionInline]


@admin.register(Relation)
class RelationAdmin(ReadableRowsAdmin):
    kb_path = "kb"
    list_display = ["source", "relation", "target", "weight", "document"]
    list_filter = ["relation", ("kb", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["source__name", "target__name"]
    raw_id_fields = ["source", "target", "document"]


@admin.register(Community)
class CommunityAdmin(ReadableRowsAdmin):
    kb_path = "kb"
    list_display = ["title", "kb", "level", "size", "rank"]
    list_filter = ["level", ("kb", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["title", "summary"]
    raw_id_fields = ["parent"]


@admin.register(GraphBuild)
class GraphBuildAdmin(ReadableRowsAdmin):
    kb_path = "kb"
    list_display = ["kb", "status", "full", "extractor", "documents", "entities", "relations", "communities", "started_at"]
    list_filter = ["status", ("kb", admin.RelatedOnlyFieldListFilter)]
    readonly_fields = [f.name for f in GraphBuild._meta.fields]
