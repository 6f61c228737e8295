from __future__ import annotations

from django.contrib import admin

from .models import ApiToken

# Staff reach the admin from the top bar; it carries the product's name, not Django's.
admin.site.site_header = "Agentic RAG administration"
admin.site.site_title = "Agentic RAG admin"
admin.site.index_title = "Documents, traces, graphs and evaluation"
admin.site.site_url = "/"


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "prefix", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "prefix", "user__username"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]
