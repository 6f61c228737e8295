"""URLs of the knowledge app."""

from __future__ import annotations

from django.urls import path

from . import playground_views, views

urlpatterns = [
    path("kb/", views.knowledge_list, name="knowledge-list"),
    path("kb/new/", views.knowledge_create, name="knowledge-create"),
    path("kb/<slug:slug>/", views.knowledge_detail, name="knowledge-detail"),
    path("kb/<slug:slug>/settings/", views.knowledge_settings, name="knowledge-settings"),
    path("kb/<slug:slug>/upload/", views.knowledge_upload, name="knowledge-upload"),
    path(
        "kb/<slug:slug>/playground/",
        playground_views.knowledge_playground,
        name="knowledge-playground",
    ),
    path("kb/<slug:slug>/documents/<int:pk>/", views.document_detail, name="document-detail"),
    path(
        "kb/<slug:slug>/documents/<int:pk>/delete/",
        views.document_delete,
        name="document-delete",
    ),
    path(
        "kb/<slug:slug>/documents/<int:pk>/reingest/",
        views.document_reingest,
        name="document-reingest",
    ),
    path(
        "kb/<slug:slug>/documents/<int:pk>/versions/<int:version>/restore/",
        views.document_restore,
        name="document-restore",
    ),
]
