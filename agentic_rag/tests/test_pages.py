"""What every page carries: skip link, favicon, the current section, the admin for staff, and
friendly error pages."""

from __future__ import annotations

import re

import pytest
from django.test import Client, override_settings

pytestmark = pytest.mark.django_db


def test_pages_have_a_skip_link_a_favicon_and_mark_the_current_section(alice_client):
    page = alice_client.get("/kb/").content.decode()

    assert '<a class="skip-link" href="#main">' in page and 'id="main"' in page
    assert 'rel="icon"' in page and "favicon.svg" in page
    assert '<a href="/kb/" aria-current="page">Knowledge bases</a>' in page
    assert '<a href="/" aria-current="page">' not in page
    assert 'class="mobile-nav"' in page
    assert "Admin</a>" not in page  # not staff


def test_staff_reach_the_admin_titled_for_the_product(django_user_model):
    staff = django_user_model.objects.create_user("root", password="x", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(staff)

    assert 'href="/admin/">Admin</a>' in client.get("/kb/").content.decode()
    assert "Agentic RAG administration" in client.get("/admin/").content.decode()


@override_settings(DEBUG=False)
def test_a_missing_page_is_friendly_and_says_what_to_do(alice_client):
    response = alice_client.get("/kb/no-such-kb/")

    assert response.status_code == 404
    body = response.content.decode()
    assert "Not found" in body and "Back to the chat" in body


def test_the_new_kb_form_speaks_plainly(alice_client):
    page = alice_client.get("/kb/new/").content.decode()

    assert "kb_prefix" not in page and "Short name" in page and 'data-slug-from="id_name"' in page


def test_every_response_carries_a_policy_that_runs_only_our_own_scripts(alice_client, client):
    for response in (alice_client.get("/kb/"), client.get("/login/")):
        policy = response.get("Content-Security-Policy", "")
        assert "script-src 'self'" in policy and "'unsafe-eval'" not in policy and "'unsafe-inline'" not in policy.split("style-src")[0]
        assert "frame-ancestors 'none'" in policy


def test_every_moment_a_page_shows_is_a_time_the_browser_puts_in_the_readers_zone(alice_client, alice):
    from django.utils import timezone

    from agentic_rag.models import ApiToken
    from chat.models import Feedback
    from chat.tests.web_factories import make_exchange

    answer = make_exchange(alice)
    Feedback.objects.create(user=alice, message=answer, trace=answer.trace, query="q", is_positive=False)
    token, _ = ApiToken.issue(alice, "zone")
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())

    for url in (f"/traces/{answer.trace.trace_id}/", "/settings/tokens/"):
        html = alice_client.get(url).content.decode()
        shown = re.findall(r"(<time[^>]*>)?([A-Z][a-z]{2} \d{1,2}, \d{4} \d{2}:\d{2})", html)
        assert shown and all(tag.startswith("<time datetime=") for tag, _ in shown), (url, shown)
