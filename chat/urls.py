"""URLs of the chat app: the chat screen at /, sessions, traces, the document editor and the HTTP API."""

from __future__ import annotations

from django.urls import path

from . import api, fact_views, views
from .document_chat import api as document_chat_api
from .document_chat import views as document_chat_views

urlpatterns = [
    path("", views.chat_home, name="chat"),
    path("chat/send/", views.chat_send, name="chat-send"),
    path("c/<str:session_id>/", views.chat_session, name="chat-session"),
    path("c/<str:session_id>/rename/", views.chat_rename, name="chat-rename"),
    path("c/<str:session_id>/delete/", views.chat_delete, name="chat-delete"),
    path("memory/", fact_views.fact_list, name="chat-facts"),
    path("memory/<int:pk>/delete/", fact_views.fact_delete, name="chat-fact-delete"),
    path("memory/delete-all/", fact_views.fact_delete_all, name="chat-facts-delete-all"),
    path("messages/<int:pk>/feedback/", views.message_feedback, name="message-feedback"),
    path("traces/<uuid:trace_id>/", views.trace_detail, name="trace-detail"),
    path("api/chat", api.chat_json, name="api-chat"),
    path("api/chat/stream", api.chat_stream, name="api-chat-stream"),
    path("api/feedback", api.feedback, name="api-feedback"),
    path("documents/<int:pk>/edit/", document_chat_views.document_editor, name="document-editor"),
    path("documents/<int:pk>/edit/assist/", document_chat_views.document_assist, name="document-assist"),
    path(
        "document-proposals/<int:pk>/<str:verdict>/",
        document_chat_views.proposal_decide,
        name="document-proposal-decide",
    ),
    path("api/document-chat", document_chat_api.document_chat, name="api-document-chat"),
    path(
        "api/document-chat/proposals/<int:pk>/<str:verdict>",
        document_chat_api.proposal_verdict,
        name="api-document-proposal",
    ),
]
