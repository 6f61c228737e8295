"""Errors Django makes around the API's views answer in the API's JSON error shape too."""

from __future__ import annotations

import json

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import include, path, reverse

pytestmark = pytest.mark.django_db


def _probe(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


def _broken(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("boom")


# This module is also the URLconf of the tests marked with it: two /api/ views the project
# does not have, one CSRF-checked and one that fails, beside the project's own.
urlpatterns = [
    path("api/probe", _probe),
    path("api/broken", _broken),
    path("", include("agentic_rag.urls")),
]


def error_of(response) -> tuple[int, str]:
    assert response["Content-Type"] == "application/json", response.content[:200]
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "code"}
    return response.status_code, body["error"]["code"]


@pytest.mark.parametrize("method", ["get", "put", "delete", "patch"])
def test_the_wrong_method_is_a_json_405_that_names_the_right_one(alice_client, method):
    response = getattr(alice_client, method)(reverse("api-chat"))

    assert error_of(response) == (405, "method_not_allowed")
    assert response["Allow"] == "POST" and "POST" in response.json()["error"]["message"]


@pytest.mark.parametrize("debug", [True, False])
def test_an_unknown_api_address_is_a_json_404(alice_client, settings, debug):
    settings.DEBUG = debug

    assert error_of(alice_client.post("/api/nothing-here")) == (404, "not_found")
    assert error_of(alice_client.get("/api/chat/")) == (404, "not_found")


def test_pages_keep_their_html_errors(alice_client):
    response = alice_client.get("/nothing-here/")

    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")


@pytest.mark.parametrize("debug", [True, False])
@pytest.mark.parametrize("content_type", ["application/json", "application/x-www-form-urlencoded"])
def test_a_body_over_the_memory_limit_is_a_json_413(alice_client, settings, debug, content_type):
    settings.DEBUG = debug
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = json.dumps({"message": "x" * 2000}) if content_type == "application/json" else "message=" + "x" * 2000

    response = alice_client.post(reverse("api-chat"), body, content_type=content_type)

    assert error_of(response) == (413, "body_too_large")
    assert "nothing was saved" in response.json()["error"]["message"]


@pytest.mark.urls(__name__)
def test_a_csrf_failure_under_api_is_a_json_403(alice):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)

    assert error_of(client.post("/api/probe", {"a": "b"})) == (403, "forbidden")


@pytest.mark.urls(__name__)
@pytest.mark.parametrize("debug", [True, False])
def test_a_server_error_under_api_is_a_json_500(alice_client, settings, debug):
    settings.DEBUG = debug
    client = Client(raise_request_exception=False)

    assert error_of(client.get("/api/broken")) == (500, "internal")
