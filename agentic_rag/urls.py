"""The project's URLs: the only place, with asgi.py, that wires the apps together."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from . import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("i18n/", include("django.conf.urls.i18n")),  # set_language: the language switch
    path("settings/tokens/", views.token_list, name="token-list"),
    path("settings/tokens/<int:pk>/revoke/", views.token_revoke, name="token-revoke"),
    path("settings/models/", views.model_list, name="model-list"),
    path("settings/models/<int:pk>/", views.model_edit, name="model-edit"),
    path("settings/models/<int:pk>/move/<str:direction>/", views.model_move, name="model-move"),
    path("settings/models/<int:pk>/delete/", views.model_delete, name="model-delete"),
    path("settings/models/<int:pk>/test/", views.model_test, name="model-test"),
    path("settings/web-search/", views.web_search_save, name="web-search-save"),
    path("", include("chat.urls")),
    path("", include("knowledge.urls")),
    path("", include("graphrag.urls")),
    path("", include("evaluation.urls")),
]
