"""URLs of the graph explorer, under each knowledge base's own prefix."""

from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("kb/<slug:slug>/graph/", views.graph_explorer, name="graph-explorer"),
    path("kb/<slug:slug>/graph/data.json", views.graph_data, name="graph-data"),
    path("kb/<slug:slug>/graph/entity/<int:pk>/", views.graph_entity, name="graph-entity"),
]
