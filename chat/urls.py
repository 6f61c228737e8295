"""URLs of the chat app: the chat screen at /, sessions, traces and the HTTP API."""

from __future__ import annotations

from django.urls import path

from . import api, views

urlpatterns = [
    path("", views.chat_home, name="chat"),
    path("chat/send/", views.chat_send, name="chat-send"),
    path("c/<str:session_id>/", views.chat_session, name="chat-session"),
    path("c/<str:session_id>/rename/", views.chat_rename, name="chat-rename"),
    path("c/<str:session_id>/delete/", views.chat_delete, name="chat-delete"),
    path("messages/<int:pk>/feedback/", views.message_feedback, name="message-feedback"),
    path("traces/<uuid:trace_id>/", views.trace_detail, name="trace-detail"),
    path("api/chat", api.chat_json, name="api-chat"),
    path("api/chat/stream", api.chat_stream, name="api-chat-stream"),
    path("api/feedback", api.feedback, name="api-feedback"),
]
