"""The language-model settings page: staff add, order, test and remove models; the chat uses
them at once; a KB may prefer one or want only quotes."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from agentic_rag.llm import CompletionOptions, Message, get_llm, reset_llm
from agentic_rag.llm.registry import decrypt_key
from agentic_rag.llm.testing import FakeOpenAIServer, FakeReply
from agentic_rag.models import ModelProvider

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client, alice):
    alice.is_staff = True
    alice.save()
    client.force_login(alice)
    return client


@pytest.fixture(autouse=True)
def _fresh_router(settings):
    settings.LLM_RETRY_MAX_ATTEMPTS = 1  # a failing model fails at once
    reset_llm()
    yield
    reset_llm()


@pytest.fixture
def staff_post(staff_client, django_capture_on_commit_callbacks):
    """POST as staff, running what the view leaves for after its commit (the router's rebuild)."""

    def post(url, data=None, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return staff_client.post(url, data or {}, **kwargs)

    return post


@pytest.fixture
def superuser_post(django_user_model, django_capture_on_commit_callbacks):
    """POST as a superuser (its own client), running the view's on-commit callbacks."""
    root = django_user_model.objects.create_superuser("root", password="root-password")
    client = Client()
    client.force_login(root)

    def post(url, data=None, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(url, data or {}, **kwargs)

    return post


@pytest.fixture
def server():
    with FakeOpenAIServer() as fake:
        yield fake


def add(post, server, name="fake", **extra):
    data = {"name": name, "base_url": server.base_url, "model": "fake-model", "api_key": "sk-secret",
            "connect_timeout_s": 2, "first_token_timeout_s": 5, "total_timeout_s": 10, "enabled": "on", **extra}
    return post(reverse("model-list"), data)


def test_only_staff_reach_the_page(alice_client, bob_client):
    assert alice_client.get(reverse("model-list")).status_code == 403
    assert bob_client.post(reverse("model-list"), {"name": "x"}).status_code == 403
    assert not ModelProvider.objects.exists()


def test_an_added_model_answers_the_next_question_with_its_key_stored_encrypted(staff_client, staff_post, server):
    before = get_llm()

    response = add(staff_post, server)

    row = ModelProvider.objects.get()
    assert response.status_code == 302
    assert "sk-secret" not in row.api_key_encrypted and decrypt_key(row.api_key_encrypted) == "sk-secret"
    router = get_llm()
    assert router is not before and [p.name for p in router.providers] == ["fake"]
    assert router.complete([Message("user", "hi")], CompletionOptions()).provider == "fake"
    assert server.chat_requests[-1].headers["Authorization"] == "Bearer sk-secret"


def test_the_key_can_come_from_the_environment_instead(staff_client, superuser_post, server, monkeypatch):
    monkeypatch.setenv("FAKE_MODEL_API_KEY", "sk-from-env")
    add(superuser_post, server, api_key="", api_key_env="FAKE_MODEL_API_KEY")

    row = ModelProvider.objects.get()
    page = staff_client.get(reverse("model-list")).content.decode()

    assert row.api_key_encrypted == "" and "from $FAKE_MODEL_API_KEY" in page


def test_a_bad_base_url_is_refused_with_a_reason(staff_client, staff_post, server):
    response = add(staff_post, server, base_url="ftp://example.com/v1")

    assert response.status_code == 400 and not ModelProvider.objects.exists()
    assert "Enter a valid URL" in response.content.decode() or "http(s)" in response.content.decode()


def test_models_are_ordered_and_the_router_follows(staff_client, staff_post, server):
    add(staff_post, server, name="first")
    add(staff_post, server, name="second")
    second = ModelProvider.objects.get(name="second")

    staff_post(reverse("model-move", args=[second.pk, "up"]))

    assert [p.name for p in get_llm().providers] == ["second", "first"]


def test_the_connection_test_shows_the_reply_or_the_error(staff_client, staff_post, server):
    add(staff_post, server)
    row = ModelProvider.objects.get()
    server.reply(text="OK")

    good = staff_client.post(reverse("model-test", args=[row.pk]), headers={"HX-Request": "true"}).content.decode()
    server.script(FakeReply(status=401, error_message="invalid api key"))
    bad = staff_client.post(reverse("model-test", args=[row.pk]), headers={"HX-Request": "true"}).content.decode()

    assert "Answered in" in good and "OK" in good
    assert "Failed" in bad and "401" in bad


def test_a_failing_model_shows_its_breaker_and_recent_failures(staff_client, staff_post, server):
    add(staff_post, server)
    server.script(*[FakeReply(status=500)] * 30)
    get_llm().complete([Message("user", "hi")], CompletionOptions())  # falls back to the reader

    page = staff_client.get(reverse("model-list")).content.decode()

    assert "500" in page.split('data-model="fake"')[1].split("</tr>")[0]


def test_removing_a_model_takes_it_out_of_the_router(staff_client, staff_post, server):
    add(staff_post, server)
    row = ModelProvider.objects.get()

    staff_post(reverse("model-delete", args=[row.pk]))

    assert not ModelProvider.objects.exists() and get_llm().providers == ()


def test_a_kb_that_wants_quotes_is_answered_by_the_reader_even_with_a_model(
    staff_client, staff_post, server, kb, alice, settings
):
    from chat.pipeline import ChatOptions, ChatRequest, run_chat
    from chat.tests.conftest import ingest_docs

    settings.CHAT_ENABLE_QUERY_REWRITE = False  # the fake model answers every request alike
    ingest_docs(kb)
    add(staff_post, server)
    kb.answer_mode = "extractive"
    kb.save()

    result = run_chat(ChatRequest(alice, None, "How does hybrid search fuse rankings?", ChatOptions(kb_slug=kb.slug)),
                      emit=lambda event: None)

    assert "Extractive answer" in result.answer
    assert not [r for r in server.chat_requests if "<documents>" in str(r.body)]  # no answer was asked of the model


def test_a_kb_tries_its_preferred_model_first(staff_client, staff_post, server, kb):
    from chat.pipeline.nodes import answer_llm

    add(staff_post, server, name="first")
    add(staff_post, server, name="second")
    kb.answer_model = ModelProvider.objects.get(name="second")
    kb.save()

    assert [p.name for p in answer_llm(kb, get_llm()).providers] == ["second", "first"]
    assert [p.name for p in get_llm().providers] == ["first", "second"]  # others keep the page's order


# --- keys: only from allowed variables, and sent only where they were saved --------------

# Server secrets a staff member might name as a model's key, with a value to look for.
SERVER_SECRETS = {
    "SECRET_KEY": "django-insecure-marker-secret",
    "DATABASE_URL": "sqlite:///marker-secret.sqlite3",
    "REDIS_URL": "redis://:marker-secret@127.0.0.1:6379/0",
}


def sent_anywhere(server, value: str) -> bool:
    """Whether any request the fake server received carries value (headers or body)."""
    return any(value in json.dumps([r.headers, r.body]) for r in server.requests)


def edit(post, row, **changes):
    data = {"name": row.name, "base_url": row.base_url, "model": row.model, "api_key": "",
            "api_key_env": row.api_key_env, "connect_timeout_s": 2, "first_token_timeout_s": 5,
            "total_timeout_s": 10, "enabled": "on", **changes}
    return post(reverse("model-edit", args=[row.pk]), data)


@pytest.mark.parametrize("name", sorted(SERVER_SECRETS))
def test_a_server_secret_is_refused_as_a_key_and_never_sent(name, staff_client, superuser_post, server, monkeypatch):
    monkeypatch.setenv(name, SERVER_SECRETS[name])

    response = add(superuser_post, server, api_key="", api_key_env=name)

    assert response.status_code == 400 and not ModelProvider.objects.exists()
    assert "_API_KEY" in response.context["form"].errors["api_key_env"][0]
    # A row that names it anyway (saved before the rule, or past the form) sends nothing with it.
    row = ModelProvider.objects.create(name="legacy", base_url=server.base_url, model="m", api_key_env=name)
    reset_llm()
    test = staff_client.post(reverse("model-test", args=[row.pk]), headers={"HX-Request": "true"})
    get_llm().complete([Message("user", "hi")], CompletionOptions())
    assert "Failed" in test.content.decode() and name in test.content.decode()
    assert not server.requests and not sent_anywhere(server, SERVER_SECRETS[name])


def test_an_allowed_variable_is_named_by_a_superuser_only(staff_client, staff_post, superuser_post, server, monkeypatch):
    monkeypatch.setenv("DEPLOY_API_KEY", "sk-deploy")

    refused = add(staff_post, server, api_key="", api_key_env="DEPLOY_API_KEY")
    accepted = add(superuser_post, server, api_key="", api_key_env="DEPLOY_API_KEY")

    assert refused.status_code == 400 and "superuser" in refused.context["form"].errors["api_key_env"][0]
    assert accepted.status_code == 302 and ModelProvider.objects.get().api_key_env == "DEPLOY_API_KEY"
    get_llm().complete([Message("user", "hi")], CompletionOptions())
    assert server.chat_requests[-1].headers["Authorization"] == "Bearer sk-deploy"


def test_only_a_superuser_sends_a_kept_key_to_a_new_address(staff_client, staff_post, superuser_post, server):
    add(staff_post, server)  # its key, sk-secret, stored encrypted
    row = ModelProvider.objects.get()
    with FakeOpenAIServer() as other:
        refused = edit(staff_post, row, base_url=other.base_url)
        row.refresh_from_db()
        staff_client.post(reverse("model-test", args=[row.pk]))
        assert refused.status_code == 400 and row.base_url == server.base_url
        assert "superuser" in refused.context["form"].errors["base_url"][0]
        assert not other.requests

        # A superuser may move the kept key; staff may point the model anywhere with a key they type.
        assert edit(superuser_post, row, base_url=other.base_url).status_code == 302
        staff_client.post(reverse("model-test", args=[row.pk]))
        assert other.chat_requests[-1].headers["Authorization"] == "Bearer sk-secret"
    assert edit(staff_post, row, base_url=server.base_url, api_key="sk-their-own").status_code == 302
    staff_client.post(reverse("model-test", args=[row.pk]))
    assert server.chat_requests[-1].headers["Authorization"] == "Bearer sk-their-own"
