"""The web search section of the Language models page: off by default, staff switch it on,
inside addresses and environment keys need the deployment or a superuser."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agentic_rag.models import WebSearchSettings
from chat.web import web_search_config

pytestmark = pytest.mark.django_db

SAVE = reverse("web-search-save")


def form(**overrides) -> dict:
    fields = {
        "enabled": "on", "provider": "searxng", "base_url": "https://searx.example.org", "api_key_env": "",
        "allow_domains": "python.org\ndocs.djangoproject.com", "deny_domains": "ads.python.org", "max_results": "5",
        "pages_per_query": "3", "connect_timeout_s": "3", "read_timeout_s": "5", "total_timeout_s": "6",
    }
    fields.update(overrides)
    return {f"web-{name}": value for name, value in fields.items() if value is not None}


@pytest.fixture
def staff_client(client, alice):
    alice.is_staff = True
    alice.save()
    client.force_login(alice)
    return client


@pytest.fixture(autouse=True)
def _public_resolver(monkeypatch):
    # The form checks where the base URL points; these tests name made-up public hosts.
    from chat.web import fetch

    real = fetch.resolve_host
    monkeypatch.setattr(fetch, "resolve_host", lambda host, port: ["93.184.216.34"] if host.endswith(".example.org") else real(host, port))


def test_it_is_off_by_default_and_the_page_says_so(staff_client):
    assert not web_search_config().is_enabled
    page = staff_client.get(reverse("model-list"))
    assert page.status_code == 200
    assert b'id="web-search"' in page.content and b"Off (set in the environment)." in page.content


def test_staff_switch_it_on_with_domain_lists(staff_client):
    response = staff_client.post(SAVE, form())
    assert response.status_code == 302
    config = web_search_config()
    assert config.is_enabled and config.provider == "searxng" and config.base_url == "https://searx.example.org"
    assert config.allow_domains == ("python.org", "docs.djangoproject.com") and config.deny_domains == ("ads.python.org",)
    assert b"On: searxng https://searx.example.org (set on this page)." in staff_client.get(reverse("model-list")).content
    staff_client.post(SAVE, form(enabled=None))
    assert WebSearchSettings.objects.count() == 1 and not web_search_config().is_enabled


@pytest.mark.parametrize("url", ["http://127.0.0.1:8888", "http://169.254.169.254", "file:///etc/passwd", "http://10.0.0.3"])
def test_an_inside_or_non_http_address_is_refused_unless_the_deployment_lists_it(staff_client, settings, url):
    response = staff_client.post(SAVE, form(base_url=url))
    assert response.status_code == 400 and not WebSearchSettings.objects.exists()
    if url.startswith("http://127."):
        settings.WEB_FETCH_ALLOW_HOSTS = ["127.0.0.1"]
        assert staff_client.post(SAVE, form(base_url=url)).status_code == 302


def test_only_a_superuser_names_a_key_variable(staff_client, django_user_model, client):
    refused = staff_client.post(SAVE, form(provider="brave", base_url="", api_key_env="BRAVE_API_KEY"))
    assert refused.status_code == 400 and b"Only a superuser" in refused.content
    django_user_model.objects.create_superuser("root", password="x")
    client.force_login(django_user_model.objects.get(username="root"))
    assert client.post(SAVE, form(provider="brave", base_url="", api_key_env="SECRET_KEY")).status_code == 400
    assert client.post(SAVE, form(provider="brave", base_url="", api_key_env="BRAVE_API_KEY")).status_code == 302


def test_the_key_is_read_from_the_named_variable_only(staff_client, monkeypatch):
    WebSearchSettings.objects.create(enabled=True, provider="brave", api_key_env="BRAVE_API_KEY")
    monkeypatch.setenv("BRAVE_API_KEY", "k-123")
    assert web_search_config().api_key == "k-123"
    WebSearchSettings.objects.update(api_key_env="DATABASE_URL")
    assert web_search_config().api_key == ""


def test_it_caps_results_and_timeouts(staff_client):
    response = staff_client.post(SAVE, form(max_results="10000", total_timeout_s="3600"))
    assert response.status_code == 400 and not WebSearchSettings.objects.exists()


def test_it_needs_staff_a_login_and_a_post(client, alice, staff_client):
    assert staff_client.get(SAVE).status_code == 405
    other = type(client)()
    assert other.post(SAVE, form()).status_code == 302  # to the login page
    alice.is_staff = False
    alice.save()
    assert staff_client.post(SAVE, form()).status_code == 403
    assert not WebSearchSettings.objects.exists()
