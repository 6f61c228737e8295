"""URLs of the evaluation pages, under a knowledge base."""

from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("kb/<slug:slug>/evaluation/", views.evaluation_home, name="evaluation-home"),
    path("kb/<slug:slug>/evaluation/runs/", views.run_start, name="evaluation-run-start"),
    path("kb/<slug:slug>/evaluation/runs/<int:pk>/", views.run_detail, name="evaluation-run"),
    path("kb/<slug:slug>/evaluation/feedback/", views.feedback_to_golden_set, name="evaluation-feedback"),
    path("kb/<slug:slug>/evaluation/sets/", views.golden_set_create, name="evaluation-set-create"),
    path("kb/<slug:slug>/evaluation/sets/import/", views.golden_set_import, name="evaluation-set-import"),
    path("kb/<slug:slug>/evaluation/sets/<int:pk>/", views.golden_set_detail, name="evaluation-set"),
    path("kb/<slug:slug>/evaluation/sets/<int:pk>/export.json", views.golden_set_export, name="evaluation-set-export"),
    path("kb/<slug:slug>/evaluation/sets/<int:pk>/delete/", views.golden_set_delete, name="evaluation-set-delete"),
    path(
        "kb/<slug:slug>/evaluation/sets/<int:pk>/questions/<int:question_pk>/",
        views.question_edit,
        name="evaluation-question",
    ),
    path(
        "kb/<slug:slug>/evaluation/sets/<int:pk>/questions/<int:question_pk>/delete/",
        views.question_delete,
        name="evaluation-question-delete",
    ),
]
