"""Websocket routes of the knowledge app, mounted by agentic_rag/asgi.py."""

from __future__ import annotations

from django.urls import path

from .consumers import KnowledgeBaseConsumer

websocket_urlpatterns = [
    path("ws/kb/<slug:slug>/", KnowledgeBaseConsumer.as_asgi()),
]
