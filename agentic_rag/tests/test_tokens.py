"""Per-user API tokens: issued once, stored hashed, checked in constant time, revocable."""

from __future__ import annotations

import hashlib
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from agentic_rag.auth import authenticate_token
from agentic_rag.models import ApiToken

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def test_it_stores_only_the_hash_of_a_key(alice):
    token, key = ApiToken.issue(alice, "notebook")
    assert key.startswith("arag_") and len(key) > 40
    assert token.key_hash == hashlib.sha256(key.encode()).hexdigest()
    assert key not in str(ApiToken.objects.filter(pk=token.pk).values().get())
    assert token.prefix == key[: len(token.prefix)] and len(token.prefix) < 16


def test_it_authenticates_the_key_and_nothing_else(alice):
    token, key = ApiToken.issue(alice, "notebook")
    assert authenticate_token(key) == token
    assert authenticate_token(key[:-1] + ("x" if key[-1] != "x" else "y")) is None
    assert authenticate_token("") is None
    token.revoke()
    assert authenticate_token(key) is None


def test_it_creates_a_token_from_the_command_line(alice):
    out, err = StringIO(), StringIO()
    call_command("create_token", "alice", "--name", "ci", stdout=out, stderr=err)
    key = out.getvalue().strip()
    assert authenticate_token(key).name == "ci"
    assert "shown once" in err.getvalue()


def test_it_refuses_a_token_for_an_unknown_user():
    with pytest.raises(CommandError, match="No user named 'nobody'"):
        call_command("create_token", "nobody", stdout=StringIO(), stderr=StringIO())


def test_it_requires_login_for_the_token_page(client, alice):
    token, _ = ApiToken.issue(alice, "x")
    for url in (reverse("token-list"), reverse("token-revoke", args=[token.pk])):
        response = client.post(url, {"name": "y"})
        assert response.status_code == 302 and response.url.startswith(reverse("login"))
    assert ApiToken.objects.count() == 1 and not ApiToken.objects.get().is_revoked


def test_it_shows_a_new_key_once(alice_client, alice):
    response = alice_client.post(reverse("token-list"), {"name": "notebook"})
    assert response.status_code == 200
    html = response.content.decode()
    token = ApiToken.objects.get(user=alice)
    key = html.split('id="new-token-key">', 1)[1].split("<", 1)[0]
    assert authenticate_token(key) == token
    again = alice_client.get(reverse("token-list")).content.decode()
    assert key not in again and f"{token.prefix}…" in again


def test_it_asks_for_a_name(alice_client):
    response = alice_client.post(reverse("token-list"), {"name": "  "})
    assert response.status_code == 400
    assert not ApiToken.objects.exists()


def test_it_lists_only_the_users_own_tokens(alice_client, bob):
    ApiToken.issue(bob, "bob's script")
    assert "bob&#x27;s script" not in alice_client.get(reverse("token-list")).content.decode()


def test_it_revokes_a_token_over_htmx(alice_client, alice):
    token, key = ApiToken.issue(alice, "notebook")
    response = alice_client.post(reverse("token-revoke", args=[token.pk]), headers=HTMX)
    assert response.status_code == 200
    assert "revoked" in response.content.decode() and "<html" not in response.content.decode()
    assert authenticate_token(key) is None


def test_it_hides_other_users_tokens_from_revoke(alice, bob):
    token, key = ApiToken.issue(alice, "notebook")
    client = Client()
    client.force_login(bob)
    assert client.post(reverse("token-revoke", args=[token.pk])).status_code == 404
    assert authenticate_token(key) == token


def test_it_rejects_a_get_to_revoke(alice_client, alice):
    token, _ = ApiToken.issue(alice, "notebook")
    assert alice_client.get(reverse("token-revoke", args=[token.pk])).status_code == 405
    assert alice_client.delete(reverse("token-list")).status_code == 405
