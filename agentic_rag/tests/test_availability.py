"""The database away for a moment: every request says 503 with Retry-After, in words on
pages and in the error shape on the API, and the request leaves nothing behind."""

from __future__ import annotations

import json

import pytest
from django.db import OperationalError
from django.db.backends.utils import CursorWrapper
from django.test import Client

from knowledge.models import KnowledgeBase

pytestmark = pytest.mark.django_db


@pytest.fixture
def database_away(monkeypatch):
    """Every query fails as it does when the server is restarting or the network drops."""

    def refuse(self, *args, **kwargs):
        raise OperationalError("could not connect to server: Connection refused")

    def away() -> None:
        monkeypatch.setattr(CursorWrapper, "execute", refuse)
        monkeypatch.setattr(CursorWrapper, "executemany", refuse)

    return away


@pytest.fixture
def signed_in(alice) -> Client:
    # The exception must become the response, as it does for a real server.
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    return client


def test_a_page_says_the_database_is_away_and_to_try_again(signed_in, database_away):
    database_away()
    response = signed_in.get("/kb/")
    assert response.status_code == 503 and response["Retry-After"] == "5"
    page = response.content.decode()
    assert "The database cannot be reached right now. Nothing was saved" in page
    assert "Traceback" not in page and "Connection refused" not in page  # no internals shown


def test_the_api_answers_503_in_its_error_shape(signed_in, database_away):
    database_away()
    response = signed_in.post("/api/chat", json.dumps({"message": "hello"}), content_type="application/json")
    assert response.status_code == 503 and response["Retry-After"] == "5"
    assert response.json()["error"]["code"] == "database_unavailable"


def test_a_form_sent_while_the_database_is_away_leaves_nothing(signed_in, database_away, monkeypatch):
    database_away()
    response = signed_in.post("/kb/new/", {"name": "Ops", "slug": "ops", "visibility": "private"})
    assert response.status_code == 503
    monkeypatch.undo()  # the database is back
    assert not KnowledgeBase.objects.filter(slug="ops").exists()
    assert signed_in.get("/kb/").status_code == 200


def test_the_page_speaks_the_browsers_language(signed_in, database_away):
    database_away()
    response = signed_in.get("/kb/", HTTP_ACCEPT_LANGUAGE="zh-CN")
    assert response.status_code == 503 and "暂时无法访问" in response.content.decode()


def test_other_errors_stay_500(signed_in, monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr("knowledge.views.render", fail)
    assert signed_in.get("/kb/").status_code == 500
