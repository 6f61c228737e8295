from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet

from .models import ApiToken

# Staff reach the admin from the top bar; it carries the product's name, not Django's.
admin.site.site_header = "Agentic RAG administration"
admin.site.site_title = "Agentic RAG admin"
admin.site.index_title = "Documents, traces, graphs and evaluation"
admin.site.site_url = "/"


class ReadableRowsAdmin(admin.ModelAdmin):
    """An admin in which staff see only the rows the app lets them read; superusers see all.

    Django's model permissions decide whether a staff member may open a model at all; this
    decides which rows: those of `owner_path` (the user field, as a lookup path) or of KBs they
    may read (`kb_path`). Choices of related rows (filters, selects) follow the same rule.
    """

    owner_path = ""
    kb_path = ""

    def get_queryset(self, request) -> QuerySet:
        rows = super().get_queryset(request)
        return rows if request.user.is_superuser else self.readable_rows(rows, request.user)

    def readable_rows(self, rows: QuerySet, user: Any) -> QuerySet:
        from knowledge.models import KnowledgeBase

        if self.owner_path:
            return rows.filter(**{self.owner_path: user})
        if self.kb_path:
            return rows.filter(**{f"{self.kb_path}__in": KnowledgeBase.objects.readable_by(user)})
        raise NotImplementedError(f"{type(self).__name__}: set owner_path or kb_path")

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        related = self.admin_site._registry.get(db_field.related_model)
        if isinstance(related, ReadableRowsAdmin) and not request.user.is_superuser:
            kwargs["queryset"] = related.get_queryset(request)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


@admin.register(ApiToken)
class ApiTokenAdmin(ReadableRowsAdmin):
    owner_path = "user"
    list_display = ["name", "user", "prefix", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "prefix", "user__username"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]
