"""Isolation between two users with private knowledge bases: nothing of Alice's reaches Bob.

Alice's world is built through the real code paths (ingestion, the chat pipeline, feedback
over the API, a golden set and an evaluation run, the graph, document chat) and carries
made-up marker words that appear nowhere else. Bob then goes through every surface: every URL
of the project aimed at Alice's objects, the chat API (session and token) and its stream, both
websockets, routing, retrieval, memory, traces, feedback, document chat, and the pages and
evaluation runs of a KB both may read. A marker in anything Bob gets back, or a change to
Alice's objects, is a leak. The checks come with controls showing that Alice (or Bob, for his
own data) does get the thing, so none passes because the thing was never there.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from agentic_rag.asgi import application
from agentic_rag.embeddings import get_embedder
from agentic_rag.models import ApiToken
from agentic_rag.tests.llm_support import configured_as_the_model
from chat import routing_kb
from chat.document_chat.workflow import stored_history
from chat.fact_extraction import extract_facts
from chat.facts import recall_facts
from chat.memory import memory_retrieve
from chat.models import Conversation, DocumentChatTurn, DocumentProposal, Feedback, Message, Trace, UserFact
from chat.pipeline import ChatOptions, ChatRefused, ChatRequest, run_chat
from chat.tests.web_factories import HANDBOOK, ingest, session_cookie
from evaluation.jobs import RunRequest, execute_run, queue_run
from evaluation.models import EvaluationRun, GoldenQuestion, GoldenSet, RelevantDocument, RunStatus
from graphrag.build import build_graph
from graphrag.models import Entity
from knowledge.models import Chunk, Document, KnowledgeBase, Visibility
from knowledge.retrieval import MODES, params_for_kb, retrieve

# The pipeline answers in a worker thread with its own connection: it must see committed rows.
pytestmark = pytest.mark.django_db(transaction=True)

# Made-up words: each one in Bob's view of anything is a leak of what carries it.
DOC_MARK = "quaxorine"  # Alice's private document: its name, its text, her KB's name
ASK_MARK = "zintrovel"  # her question in her private KB
TITLE_MARK = "mordwyn"  # the title she gives that conversation
FEEDBACK_MARK = "plexivane"  # her thumbs-down comments
SET_MARK = "glimmerstoat"  # her golden set and its question
DOCCHAT_MARK = "vorpelite"  # her document-chat instruction on the shared KB
SHARED_MARK = "brindlequay"  # her question in the KB she shares with Bob
FACT_MARK = "truvessel"  # a fact she stated about her work (semantic memory)
MARKERS = (DOC_MARK, ASK_MARK, TITLE_MARK, FEEDBACK_MARK, SET_MARK, DOCCHAT_MARK, SHARED_MARK, FACT_MARK)

# Every sentence names the marker, so any quote of the document shows it; the CamelCase name
# gives the rule extractor an entity for the graph.
ALICE_DOC_NAME = f"{DOC_MARK}-protocol.md"
ALICE_DOC = f"""# {DOC_MARK.title()} protocol

{DOC_MARK.title()} crystals are calibrated in the cryostat at minus forty degrees before each {DOC_MARK} assay.
The {DOC_MARK.title()}Probe uses PostgreSQL for the {DOC_MARK} calibration log of every cryostat run.

## Storage

{DOC_MARK.title()} samples are stored in amber vials, since {DOC_MARK} decays in daylight within three hours.
""".encode()
# Her document's words without its marker: what Bob could ask about her topic.
CRYOSTAT_QUESTION = "How are the crystals calibrated in the cryostat before each assay?"

BOB_DOC = b"""# Sourdough

Knead the dough for ten minutes, then let the dough rise for two hours until it doubles.
Bake the bread at 220 degrees for thirty minutes in a hot oven.
"""

API_CHAT = reverse("api-chat")
API_STREAM = reverse("api-chat-stream")
API_FEEDBACK = reverse("api-feedback")
API_DOCUMENT_CHAT = reverse("api-document-chat")
HTMX_HEADERS = {"HX-Request": "true", "HX-Trigger": "chat-form", "HX-Current-URL": "http://127.0.0.1/"}


def leaked(content: str | bytes) -> list[str]:
    """The markers in content (case-insensitive): any one is a leak."""
    text = (content.decode(errors="replace") if isinstance(content, bytes) else content).lower()
    return [marker for marker in MARKERS if marker in text]


def body_of(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def post_json(client: Client, url: str, payload: dict, **extra):
    return client.post(url, json.dumps(payload), content_type="application/json", **extra)


def bearer(key: str) -> dict[str, dict[str, str]]:
    return {"headers": {"Authorization": f"Bearer {key}"}}


def token_client(key: str) -> Client:
    """A client that signs in with an API token only (no session)."""
    return Client(**bearer(key))


def sse_events(body: bytes) -> list[tuple[str, Any]]:
    events = []
    for block in body.decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if "event" in fields:
            events.append((fields["event"], json.loads(fields["data"])))
    return events


def trace_text(trace: Trace) -> str:
    """All a stored trace says: question, route, verification and every span's input and output."""
    spans = [f"{span.name} {span.input} {span.output} {span.error}" for span in trace.spans.all()]
    return " ".join([trace.question, trace.route, trace.error, json.dumps(trace.verification), *spans])


@dataclass
class World:
    alice: AbstractUser
    bob: AbstractUser
    kb: KnowledgeBase  # Alice's, private
    team_kb: KnowledgeBase  # Alice's, shared with Bob as a member (so he may read and write it)
    bob_kb: KnowledgeBase
    document: Document
    team_document: Document
    auto_reply: dict  # her routed question, as /api/chat answered it
    answer: Message  # her answer in her private KB
    team_answer: Message  # her answer in the shared KB
    team_feedback: Feedback
    golden_set: GoldenSet
    question: GoldenQuestion
    run: EvaluationRun
    entity: Entity
    token: ApiToken
    proposal: DocumentProposal
    docchat_conversation: str
    bob_key: str
    fact: UserFact

    @property
    def session_id(self) -> str:
        return self.answer.conversation.session_id

    @property
    def trace_id(self) -> str:
        return str(self.answer.trace.trace_id)

    @property
    def chunk_ids(self) -> set[int]:
        return set(Chunk.objects.filter(kb=self.kb).values_list("pk", flat=True))


def _ask(client: Client, message: str, kb: str, **fields) -> dict:
    response = post_json(client, API_CHAT, {"message": message, "kb": kb, **fields})
    assert response.status_code == 200, response.content
    return response.json()


def _answer_of(reply: dict) -> Message:
    answers = Message.objects.select_related("conversation", "trace").filter(role="assistant")
    return answers.get(trace__trace_id=reply["trace_id"])


@pytest.fixture(autouse=True)
def _fresh_routing_profiles():
    # Routing profiles are cached per process: each test routes over its own KBs only.
    routing_kb.clear_profiles()
    yield
    routing_kb.clear_profiles()


@pytest.fixture
def world(alice, bob, kb, alice_client) -> World:
    """Alice's private KB and what she did in it, a KB she shares with Bob, and Bob's own KB."""
    kb.name, kb.description = f"{DOC_MARK.title()} lab", f"notes on {DOC_MARK} crystals"
    kb.save()
    # A member left over from when it was shared: private still means the owner alone.
    kb.members.add(bob)
    ingest(kb, alice, ALICE_DOC_NAME, ALICE_DOC)
    team_kb = KnowledgeBase.objects.create(
        slug="team-kb", name="Team handbook", owner=alice, visibility=Visibility.SHARED
    )
    team_kb.members.add(bob)
    ingest(team_kb, alice, "handbook.md", HANDBOOK)
    bob_kb = KnowledgeBase.objects.create(slug="bob-kb", name="Bob's baking", owner=bob)
    ingest(bob_kb, bob, "sourdough.md", BOB_DOC)

    # Her questions through the real pipeline: one routed by content (which builds the routing
    # profiles), one in her private KB in the same session, one in the shared KB.
    auto_reply = _ask(alice_client, CRYOSTAT_QUESTION, "auto")
    mine = _ask(alice_client, f"Where is the {ASK_MARK} calibration log kept?", kb.slug,
                session_id=auto_reply["session_id"])
    shared = _ask(alice_client, f"How do we review incidents for {SHARED_MARK}?", team_kb.slug)
    alice_client.post(reverse("chat-rename", args=[mine["session_id"]]), {"title": f"{TITLE_MARK} calibration"})
    answer, team_answer = _answer_of(mine), _answer_of(shared)

    token, key = ApiToken.issue(alice, "lab notebook")
    for message in (answer, team_answer):
        verdict = {"message_id": message.pk, "is_positive": False, "comment": f"{FEEDBACK_MARK}: wrong"}
        assert post_json(Client(), API_FEEDBACK, verdict, **bearer(key)).status_code == 201

    document = kb.documents.get()
    golden_set = GoldenSet.objects.create(kb=kb, name=f"{SET_MARK} checks")
    question = GoldenQuestion.objects.create(golden_set=golden_set, qid="q1", text=f"{SET_MARK}: where is the log?")
    RelevantDocument.objects.create(question=question, document=document)
    run = queue_run(kb, RunRequest(golden_set, "bm25"), alice, dispatch_run=lambda pk: None)
    execute_run(run.pk)
    build_graph(kb)  # ingestion schedules one too, but debounced per KB id in a cache tests share

    team_document = team_kb.documents.get()
    docchat_conversation = "alice-section-talk"
    docchat = post_json(alice_client, API_DOCUMENT_CHAT, {
        "message": f"Condense this section, {DOCCHAT_MARK}", "document_id": team_document.pk,
        "selected_section": {"index": "1"}, "conversation_id": docchat_conversation,
    })
    assert docchat.status_code == 200, docchat.content

    world = World(
        alice=alice, bob=bob, kb=kb, team_kb=team_kb, bob_kb=bob_kb, document=document,
        team_document=team_document, auto_reply=auto_reply, answer=answer, team_answer=team_answer,
        team_feedback=Feedback.objects.get(message=team_answer), golden_set=golden_set, question=question,
        run=EvaluationRun.objects.get(pk=run.pk), token=token,
        entity=Entity.objects.filter(kb=kb, name__icontains=DOC_MARK).first(),
        proposal=DocumentProposal.objects.get(pk=docchat.json()["proposal"]["id"]),
        docchat_conversation=docchat_conversation, bob_key=ApiToken.issue(bob, "bob's script")[1],
        fact=_state_fact(alice, f"We use {FACT_MARK.title()} 15."),
    )
    # The world is what the checks assume: built for real, and carrying its markers.
    assert world.run.status == RunStatus.DONE, world.run.error
    assert world.entity is not None and DOC_MARK in world.entity.name.lower()
    assert answer.conversation.title == f"{TITLE_MARK} calibration"
    assert Trace.objects.filter(user=alice).count() == 4  # three chat traces and one document chat
    assert alice.chat_memories.count() == 3
    return world


def _state_fact(user: AbstractUser, text: str) -> UserFact:
    """Keep a fact as the background task would after the user stated it."""
    (stated,) = extract_facts(text)
    return UserFact.objects.create(
        user=user, text=stated.text, key=stated.key, category=stated.category, terms=stated.recall_terms()
    )


def alice_state(world: World) -> dict[str, list]:
    """Everything of Alice's that Bob might change, as comparable rows."""
    alice = world.alice
    return {
        "kbs": list(KnowledgeBase.objects.filter(owner=alice).values_list("slug", "name", "visibility", "description")),
        "members": list(KnowledgeBase.members.through.objects.filter(knowledgebase__owner=alice).values_list("knowledgebase_id", "user_id")),
        "documents": list(Document.objects.filter(kb__owner=alice).values_list("pk", "name", "version", "status")),
        "conversations": list(Conversation.objects.filter(user=alice).values_list("session_id", "title", "kb_id")),
        "messages": list(Message.objects.filter(conversation__user=alice).values_list("pk", "content")),
        "feedback": list(
            Feedback.objects.filter(message__conversation__user=alice).values_list("user_id", "is_positive", "comment")
        ),
        "traces": list(Trace.objects.filter(user=alice).values_list("trace_id", "conversation_id")),
        "tokens": list(ApiToken.objects.filter(user=alice).values_list("pk", "revoked_at")),
        "sets": list(GoldenSet.objects.filter(kb__owner=alice).values_list("pk", "name")),
        "questions": list(GoldenQuestion.objects.filter(golden_set__kb__owner=alice).values_list("pk", "text")),
        "runs": list(EvaluationRun.objects.filter(kb__owner=alice).values_list("pk", "status")),
        "proposals": list(DocumentProposal.objects.filter(user=alice).values_list("pk", "status")),
        "entities": list(Entity.objects.filter(kb__owner=alice).values_list("pk", "name")),
        "facts": list(UserFact.objects.filter(user=alice).values_list("pk", "text")),
    }


# --- every URL ----------------------------------------------------------------------------

# Neither owned nor secret: signing in and out, the language switch; the admin has its own check.
UNWALKED = {"login", "logout", "set_language"}
# Which of Alice's objects each URL's `pk` names (a World attribute). A new URL with a pk must
# be added here, or the walk fails: every object URL is aimed at her.
PK_OF = {
    "token-revoke": "token",
    "message-feedback": "answer",
    "document-editor": "document",
    "document-assist": "document",
    "document-proposal-decide": "proposal",
    "api-document-proposal": "proposal",
    "document-detail": "document",
    "document-delete": "document",
    "document-reingest": "document",
    "document-restore": "document",
    "graph-entity": "entity",
    "evaluation-run": "run",
    "evaluation-set": "golden_set",
    "evaluation-set-export": "golden_set",
    "evaluation-set-delete": "golden_set",
    "evaluation-question": "golden_set",
    "evaluation-question-delete": "golden_set",
    "chat-fact-delete": "fact",
    # Language models are no one's own: staff only, so any pk is refused to Bob.
    "model-edit": None,
    "model-move": None,
    "model-delete": None,
    "model-test": None,
}
_PARAM = re.compile(r"<(?:\w+:)?(\w+)>")


def project_routes(patterns=None, prefix: str = "") -> list[tuple[str, str]]:
    """(route, name) of every URL pattern of the project, includes expanded; the admin left out."""
    routes = []
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            if getattr(pattern, "app_name", None) != "admin":
                routes += project_routes(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern) and pattern.name not in UNWALKED:
            routes.append((route, pattern.name))
    return routes


# Identifiers of nothing at all: Bob must not be able to tell hers from these.
MISSING = {"slug": "no-such-kb", "session_id": "no-such-session", "trace_id": "00000000-0000-4000-8000-000000000000",
           "pk": "999999", "question_pk": "999999"}


def her_values(route: str, name: str, world: World) -> dict[str, str]:
    """A value of Alice's for every parameter the route takes."""
    if "pk" in _PARAM.findall(route):
        assert name in PK_OF, f"{name}: say in PK_OF which of Alice's objects its pk names"
    pk = str(getattr(world, PK_OF[name]).pk) if PK_OF.get(name) else "1"
    return {
        "slug": world.kb.slug, "session_id": world.session_id, "trace_id": world.trace_id, "pk": pk,
        "question_pk": str(world.question.pk), "version": "1", "verdict": "accept", "direction": "up",
    }


def fill(route: str, values: dict[str, str]) -> str:
    def value(match: re.Match) -> str:
        assert match.group(1) in values, f"{route}: no value for <{match.group(1)}>"
        return values[match.group(1)]

    return "/" + _PARAM.sub(value, route)


def url_variants(route: str, name: str, world: World) -> dict[str, str]:
    """The route aimed at Alice's objects; at nothing; and at her objects through the KB Bob may write."""
    params, hers = set(_PARAM.findall(route)), her_values(route, name, world)
    variants = {"hers": fill(route, hers)}
    if params:
        variants["missing"] = fill(route, {**hers, **MISSING})
    if "slug" in params and len(params) > 1:
        variants["through the shared KB"] = fill(route, {**hers, "slug": world.team_kb.slug})
    return variants


@pytest.fixture
def staff_client(django_user_model) -> Client:
    """Carol: staff (she may open the admin and the model settings), with no permission granted."""
    carol = django_user_model.objects.create_user("carol", password="carol-password", is_staff=True)
    client = Client()
    client.force_login(carol)
    return client


@pytest.mark.parametrize("outsider", ["bob_client", "staff_client"])
def test_bob_sees_none_of_alices_pages_and_changes_none_of_her_objects(world, outsider, request):
    # Staff read by the same rule as everyone: being staff opens no one else's data.
    bob_client = request.getfixturevalue(outsider)
    routes = project_routes()
    before = alice_state(world)
    # Query strings and form fields name her objects too, for the views that read them.
    query = {"kb": world.kb.slug, "session_id": world.session_id, "feedback": world.team_feedback.pk,
             "set": world.golden_set.pk, "c": world.docchat_conversation, "compare": world.run.pk}
    form = {**query, "message": "hello", "title": "renamed by bob", "value": "up", "name": "bob's",
            "message_id": world.answer.pk, "is_positive": "true", "document_id": world.document.pk,
            "golden_set": world.golden_set.pk, "relevant": world.document.pk, "kind": "bm25"}
    her_ids = (f"/{world.kb.slug}/", world.session_id, world.trace_id)
    problems = []
    for route, name in routes:
        variants = url_variants(route, name, world)
        for method in ("get", "post"):
            statuses = {}
            for label, url in variants.items():
                response = getattr(bob_client, method)(url, query if method == "get" else form)
                status = statuses[label] = response.status_code
                where = f"{method.upper()} {url} ({name}, {label})"
                if seen := leaked(body_of(response)):
                    problems.append(f"{where} shows {seen}")
                if status >= 500:
                    problems.append(f"{where} failed with {status}")
                elif label != "missing" and len(variants) > 1 and status not in (403, 404, 405):
                    location = response.get("Location", "")
                    if status != 302 or any(her in location for her in her_ids):
                        problems.append(f"{where} answered {status} {location}".strip())
            if statuses.get("missing", statuses["hers"]) != statuses["hers"]:
                problems.append(f"{method.upper()} {name}: {statuses} tells her object from a missing one")
    assert not problems, "\n".join(problems)
    assert alice_state(world) == before
    # The walk reached the surfaces it is meant to (a control against a walk of nothing).
    assert len(routes) >= 45 and {"trace-detail", "chat-session", "graph-entity", "api-chat"} <= {n for _, n in routes}


def test_alice_sees_her_own_pages_so_the_walk_can_fail(world, alice_client):
    pages = [
        reverse("knowledge-list"), reverse("chat-session", args=[world.session_id]),
        reverse("trace-detail", args=[world.trace_id]), reverse("document-detail", args=[world.kb.slug, world.document.pk]),
        reverse("evaluation-home", args=[world.kb.slug]), reverse("graph-entity", args=[world.kb.slug, world.entity.pk]),
        reverse("evaluation-set", args=[world.kb.slug, world.golden_set.pk]), reverse("chat-facts"),
    ]
    for url in pages:
        response = alice_client.get(url)
        assert response.status_code == 200 and leaked(response.content), url


def test_the_admin_sends_bob_to_its_login(world, bob_client):
    for url in ("/admin/", reverse("admin:knowledge_document_change", args=[world.document.pk]),
                reverse("admin:chat_conversation_changelist")):
        response = bob_client.get(url)
        assert response.status_code == 302 and response["Location"].startswith(reverse("admin:login")), url
        assert not leaked(response.content)


def her_admin_objects(world: World) -> list[Any]:
    """One of Alice's rows of each kind the admin shows, all carrying (or leading to) her markers."""
    trace = world.answer.trace
    return [world.kb, world.document, Chunk.objects.filter(kb=world.kb).first(), world.answer.conversation,
            world.answer, trace, trace.spans.first(), world.team_feedback, world.proposal, world.golden_set,
            world.question, world.run, world.entity, world.token]


def admin_pages(world: World) -> list[str]:
    """Every registered model's list, and the change and history pages of Alice's rows."""
    from django.contrib import admin

    pages = ["/admin/"]
    for model in admin.site._registry:
        pages.append(reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist"))
    for row in her_admin_objects(world):
        name = f"admin:{row._meta.app_label}_{row._meta.model_name}"
        pages += [reverse(f"{name}_change", args=[row.pk]), reverse(f"{name}_history", args=[row.pk])]
    return pages


def test_staff_without_permissions_see_nothing_in_the_admin(world, staff_client):
    for url in admin_pages(world):
        response = staff_client.get(url, follow=True)
        assert response.status_code in (200, 403) and not leaked(response.content), url
        if url.endswith(("/change/", "/changelist/")) or url.count("/") == 4:  # a model's list or form
            assert response.status_code == 403, url  # no model is theirs to view


def test_staff_allowed_to_view_see_only_the_rows_they_may_read(world, staff_client, django_user_model):
    from django.contrib.auth.models import Permission

    carol = django_user_model.objects.get(username="carol")
    carol.user_permissions.set(Permission.objects.filter(codename__startswith="view_"))
    root = django_user_model.objects.create_superuser("root", password="root-password")
    superuser = Client()
    superuser.force_login(root)

    pages = admin_pages(world)
    seen_by_root = [url for url in pages if leaked(superuser.get(url).content)]
    problems = []
    for url in pages:
        response = staff_client.get(url, follow=True)
        if response.status_code != 200 or leaked(response.content):
            problems.append(f"{url}: {response.status_code} {leaked(response.content)}")

    assert not problems, "\n".join(problems)
    assert len(seen_by_root) >= 20  # the control: a superuser sees her rows on these pages


# --- the chat API -------------------------------------------------------------------------


def test_the_chat_api_refuses_alices_kb_exactly_as_a_missing_one(world, bob_client):
    for client in (bob_client, token_client(world.bob_key)):
        for url in (API_CHAT, API_STREAM):
            hers = post_json(client, url, {"message": CRYOSTAT_QUESTION, "kb": world.kb.slug})
            missing = post_json(client, url, {"message": CRYOSTAT_QUESTION, "kb": "no-such-kb"})
            assert (hers.status_code, hers.json()) == (missing.status_code, missing.json())
            assert hers.json()["error"]["code"] == "unknown_kb" and hers.status_code == 404
    # The pipeline refuses too, for the callers that skip the form (`ask`, answer runs).
    refusals = []
    for slug in (world.kb.slug, "no-such-kb"):
        with pytest.raises(ChatRefused) as refused:
            run_chat(ChatRequest(world.bob, None, CRYOSTAT_QUESTION, ChatOptions(kb_slug=slug)), emit=lambda event: None)
        refusals.append(str(refused.value).replace(slug, "<kb>"))
    assert refusals[0] == refusals[1]
    assert not Message.objects.filter(conversation__user=world.bob).exists()
    # Her own token opens her KB: the refusal above is Bob's, not a broken KB.
    assert post_json(Client(), API_CHAT, {"message": CRYOSTAT_QUESTION, "kb": world.kb.slug},
                     **bearer(ApiToken.issue(world.alice, "again")[1])).status_code == 200


def test_bobs_questions_about_her_topic_never_reach_her_kb(world, bob_client):
    # The control: the same question routed for Alice goes to her KB and quotes her document.
    assert world.auto_reply["route"]["kb_prefix"] == world.kb.slug and DOC_MARK in world.auto_reply["answer"].lower()
    hers = (world.kb.slug, ALICE_DOC_NAME)
    # Half about the shared handbook, so Bob's runs do retrieve: evidence comes, none of it hers.
    mixed = "How do we review incidents and calibrate crystals in the cryostat?"
    for client in (bob_client, token_client(world.bob_key)):
        reply = json.dumps(_ask(client, CRYOSTAT_QUESTION, "auto"))  # answer, citations, route, trace id
        assert not leaked(reply) and not any(h in reply for h in hers)
        for kb in ("auto", world.team_kb.slug):
            response = post_json(client, API_STREAM, {"message": mixed, "kb": kb})
            body = body_of(response)
            assert response.status_code == 200 and not leaked(body) and not any(h.encode() in body for h in hers), kb
            evidence = [item for name, data in sse_events(body) if name == "retrieval" for item in data["evidence"]]
            assert evidence and not {item.get("chunk_id") for item in evidence} & world.chunk_ids, kb

    # What the runs stored for Bob: traces and spans name nothing of hers either.
    traces = list(Trace.objects.filter(user=world.bob))
    assert len(traces) == 6
    for trace in traces:
        stored = trace_text(trace)
        assert not leaked(stored) and not any(h in stored for h in hers), trace.trace_id


def test_routing_for_bob_never_picks_her_kb(world):
    assert routing_kb.route(world.alice, CRYOSTAT_QUESTION).kb_prefix == world.kb.slug  # the control
    decision = routing_kb.route(world.bob, CRYOSTAT_QUESTION)
    assert world.kb.slug not in (decision.kb_prefix, decision.routed_kb_prefix)
    assert world.kb.slug not in decision.reason and not leaked(decision.reason)
    scored = {slug for slug, _ in routing_kb.score_kbs(world.bob, CRYOSTAT_QUESTION, embedder_for=get_embedder)}
    assert scored == {world.bob_kb.slug, world.team_kb.slug}


def test_retrieval_in_bobs_kbs_never_returns_her_chunks(world):
    # Her KB first, so the backend holds her index when Bob's KBs are searched.
    assert {c.chunk_id for c in retrieve(CRYOSTAT_QUESTION, world.kb).candidates} & world.chunk_ids
    question = "How do we review incidents and calibrate crystals in the cryostat?"
    for kb in (world.team_kb, world.bob_kb):
        for mode in MODES:
            result = retrieve(question, kb, params_for_kb(kb, mode=mode))
            found = result.candidates + result.fused + [c for leg in result.legs.values() for c in leg]
            assert not {c.chunk_id for c in found} & world.chunk_ids, (kb.slug, mode)
            assert not leaked(" ".join(f"{c.doc_name} {c.text}" for c in found)), (kb.slug, mode)
    assert retrieve(question, world.team_kb).candidates  # Bob's search does find things


def test_memory_recall_for_bob_never_includes_her_exchanges(world, bob_client):
    _ask(bob_client, "How long does the dough rise?", world.bob_kb.slug)
    her_question = world.answer.trace.question
    assert any(ASK_MARK in r.question for r in memory_retrieve(world.alice, her_question, k=10, min_similarity=-1.0))
    recalled = memory_retrieve(world.bob, her_question, k=50, min_similarity=-1.0)
    assert [r.question for r in recalled] == ["How long does the dough rise?"]
    assert not leaked(" ".join(f"{r.question} {r.answer}" for r in recalled))


def test_fact_recall_for_bob_never_includes_her_facts(world):
    question = f"Which {FACT_MARK} version do we use?"
    assert [f.text for f in recall_facts(world.alice, question)] == [world.fact.text]
    _state_fact(world.bob, "We use Redis 7.")
    assert recall_facts(world.bob, question) == []
    assert [f.text for f in recall_facts(world.bob, f"Which Redis version do we use, {FACT_MARK}?")] == ["We use Redis 7"]


def test_her_trace_and_conversation_are_404_to_bob(world, alice_client, bob_client):
    pages = [reverse("trace-detail", args=[world.trace_id]), reverse("chat-session", args=[world.session_id]),
             reverse("trace-detail", args=[world.team_answer.trace.trace_id]),
             reverse("chat-session", args=[world.team_answer.conversation.session_id])]
    for url in pages:
        assert alice_client.get(url).status_code == 200, url
        response = bob_client.get(url)
        assert response.status_code == 404 and not leaked(response.content), url


def test_feedback_on_her_answer_is_refused_as_a_missing_message(world, bob_client):
    before = alice_state(world)
    for client in (bob_client, token_client(world.bob_key)):
        hers = post_json(client, API_FEEDBACK, {"message_id": world.answer.pk, "is_positive": True, "comment": "nice"})
        missing = post_json(client, API_FEEDBACK, {"message_id": 10**9, "is_positive": True, "comment": "nice"})
        assert hers.status_code == missing.status_code == 404 and hers.json() == missing.json()
    assert bob_client.post(reverse("message-feedback", args=[world.answer.pk]), {"value": "up"}).status_code == 404
    assert alice_state(world) == before and not Feedback.objects.filter(user=world.bob).exists()


def test_bobs_own_forms_take_none_of_her_objects(world, bob_client):
    bob_set = GoldenSet.objects.create(kb=world.bob_kb, name="bob's checks")
    added = bob_client.post(reverse("evaluation-set", args=[world.bob_kb.slug, bob_set.pk]), {
        "qid": "q1", "text": "Where is the log?", "keywords": "", "expected_shortcut": "", "relevant": [world.document.pk],
    })
    started = bob_client.post(reverse("evaluation-run-start", args=[world.bob_kb.slug]),
                              {"golden_set": world.golden_set.pk, "kind": "bm25", "agent": "auto"})
    assert (added.status_code, started.status_code) == (400, 400)
    assert not leaked(added.content) and not leaked(started.content)
    assert not RelevantDocument.objects.filter(document=world.document).exclude(question=world.question).exists()
    assert not EvaluationRun.objects.exclude(pk=world.run.pk).exists()
    # A section of her document named in a request about the shared one.
    reply = post_json(bob_client, API_DOCUMENT_CHAT, {
        "message": "What does this say?", "document_id": world.team_document.pk,
        "selected_section": {"code": f"{world.document.pk}:1"},
    })
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "unknown_section" and not leaked(reply.content)


# --- document chat ------------------------------------------------------------------------


def test_document_chat_on_her_document_is_refused_as_a_missing_one(world, bob_client):
    for client in (bob_client, token_client(world.bob_key)):
        for mode in ("json", "sse"):
            ask = {"message": "What does this say?", "selected_section": {"index": "1"}, "response_mode": mode}
            hers = post_json(client, API_DOCUMENT_CHAT, {**ask, "document_id": world.document.pk})
            missing = post_json(client, API_DOCUMENT_CHAT, {**ask, "document_id": 10**9})
            assert (hers.status_code, hers.json()) == (missing.status_code, missing.json()) and hers.status_code == 404
        # A section code of her document, without the document: nothing of it is read.
        probe = post_json(client, API_DOCUMENT_CHAT, {"message": "What does this say?",
                                                      "selected_section": {"code": f"{world.document.pk}:0"}})
        assert not leaked(body_of(probe)) and ALICE_DOC_NAME not in body_of(probe).decode()
    assert bob_client.get(reverse("document-editor", args=[world.document.pk])).status_code == 404


def test_on_the_shared_document_bob_gets_none_of_her_document_chat(world, alice_client, bob_client, caplog):
    editor = f"{reverse('document-editor', args=[world.team_document.pk])}?section=1&c={world.docchat_conversation}"
    assert DOCCHAT_MARK in alice_client.get(editor).content.decode()  # the control
    page = bob_client.get(editor)
    assert page.status_code == 200 and not leaked(page.content)

    # Asked in her conversation id, Bob's turn reads none of her history and joins none of it.
    caplog.set_level("INFO", logger="chat.document_chat")
    caplog.clear()
    reply = post_json(bob_client, API_DOCUMENT_CHAT, {
        "message": "What did I ask before?", "document_id": world.team_document.pk,
        "selected_section": {"index": "1"}, "conversation_id": world.docchat_conversation,
    })
    assert reply.status_code == 200 and not leaked(reply.content)
    assert DocumentChatTurn.objects.filter(user=world.alice).count() == 1
    assert not leaked(trace_text(Trace.objects.get(user=world.bob)))
    # Its search keywords (logged, not shown) take none of her words; hers do, as the control.
    assert "rag_query_built" in caplog.text and not leaked(caplog.text)
    assert DOCCHAT_MARK in " ".join(stored_history(world.alice, world.docchat_conversation))
    # Bob writes this KB, yet her proposal is hers alone to accept or reject.
    for url in (reverse("api-document-proposal", args=[world.proposal.pk, "accept"]),
                reverse("document-proposal-decide", args=[world.proposal.pk, "reject"])):
        assert bob_client.post(url).status_code == 404, url
    world.proposal.refresh_from_db()
    assert world.proposal.status == "proposed"


# --- a KB both may read -------------------------------------------------------------------


def test_on_the_shared_kb_bob_is_offered_none_of_her_feedback_or_conversations(world, alice_client, bob_client):
    home = reverse("evaluation-home", args=[world.team_kb.slug])
    assert SHARED_MARK in alice_client.get(home).content.decode()  # her thumbs-down is offered to her
    page = bob_client.get(home)
    assert page.status_code == 200 and "data-candidates" not in page.content.decode() and not leaked(page.content)

    # Asked for by its id, her thumbs-down drafts nothing for Bob, who may write this KB's sets.
    team_set = GoldenSet.objects.create(kb=world.team_kb, name="team checks")
    draft = bob_client.get(reverse("evaluation-feedback", args=[world.team_kb.slug]),
                           {"feedback": world.team_feedback.pk, "set": team_set.pk}, follow=True)
    assert draft.status_code == 200 and not leaked(draft.content)
    assert not draft.context["form"].initial
    assert alice_client.get(reverse("evaluation-set", args=[world.team_kb.slug, team_set.pk]),
                            {"feedback": world.team_feedback.pk}).context["form"].initial  # the control

    # Her conversations, in the shared KB too, are listed for her only.
    assert TITLE_MARK in alice_client.get(reverse("chat")).content.decode()
    for url in (reverse("chat"), f"{reverse('chat')}?kb={world.team_kb.slug}", reverse("knowledge-list"),
                reverse("knowledge-detail", args=[world.team_kb.slug]),
                reverse("document-detail", args=[world.team_kb.slug, world.team_document.pk]),
                reverse("graph-explorer", args=[world.team_kb.slug]),
                reverse("knowledge-playground", args=[world.team_kb.slug])):
        response = bob_client.get(url)
        assert response.status_code == 200 and not leaked(response.content), url


@pytest.fixture
def fake_model(settings):
    """A configured language model (a fake OpenAI-compatible server) that records every prompt."""
    with configured_as_the_model(settings) as server:
        yield server


def test_her_answer_run_on_the_shared_kb_sends_the_model_none_of_her_private_exchanges(
    world, alice_client, bob_client, fake_model
):
    # A golden question of the shared KB much like one she asked in her private KB.
    question = "Where is the calibration log kept?"
    assert any(ASK_MARK in r.question for r in memory_retrieve(world.alice, question))  # what recall would find
    team_set = GoldenSet.objects.create(kb=world.team_kb, name="team checks")
    golden = GoldenQuestion.objects.create(golden_set=team_set, qid="t1", text=question, expected_keywords=["log"])
    RelevantDocument.objects.create(question=golden, document=world.team_document)

    alice_client.post(reverse("evaluation-run-start", args=[world.team_kb.slug]),
                      {"golden_set": team_set.pk, "kind": "answers", "agent": "auto"})

    run = EvaluationRun.objects.get(kb=world.team_kb)
    assert run.status == RunStatus.DONE and run.requested_by == world.alice, run.error
    # Every reader of the shared KB sees the run's answers, so what the model is given to write
    # them must hold nothing from her private KB: no recall of her other conversations.
    prompts = [json.dumps(request.messages) for request in fake_model.chat_requests]
    assert prompts and not [leaked(prompt) for prompt in prompts if leaked(prompt)]
    page = bob_client.get(reverse("evaluation-run", args=[world.team_kb.slug, run.pk]))
    assert page.status_code == 200 and question in page.content.decode() and not leaked(page.content)


# --- websockets ---------------------------------------------------------------------------


def _headers(user) -> list[tuple[bytes, bytes]]:
    return [(b"origin", b"http://127.0.0.1"), (b"cookie", session_cookie(user).encode())]


async def _connect(path: str, headers) -> tuple[WebsocketCommunicator, bool]:
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await communicator.connect()
    return communicator, connected


async def test_the_chat_websocket_keeps_her_session_from_bob(world):
    def her_messages() -> list[int]:
        return list(world.answer.conversation.messages.values_list("pk", flat=True))

    before = await database_sync_to_async(her_messages)()
    bob_headers = await database_sync_to_async(_headers)(world.bob)
    communicator, connected = await _connect("/ws/chat/", bob_headers)
    assert connected
    payload = {"message": "What did I ask about before?", "session_id": world.session_id, "kb": world.team_kb.slug,
               "HEADERS": {**HTMX_HEADERS, "HX-Current-URL": f"http://127.0.0.1/c/{world.session_id}/"}}
    await communicator.send_to(text_data=json.dumps(payload))
    fragments = []
    while not re.search(r'hx-swap-oob="outerHTML:#turn-|alert error', fragments[-1] if fragments else ""):
        fragments.append(await communicator.receive_from(timeout=10))
    await communicator.disconnect()

    assert "outerHTML:#turn-" in fragments[-1]  # answered, not refused
    assert not leaked("\n".join(fragments))
    conversations = await database_sync_to_async(
        lambda: list(Conversation.objects.filter(session_id=world.session_id).values_list("user__username", "title"))
    )()
    # Bob's question opened his own conversation under that id; hers kept its title and messages.
    assert sorted(conversations) == [("alice", f"{TITLE_MARK} calibration"), ("bob", "What did I ask about before?")]
    assert await database_sync_to_async(her_messages)() == before


async def test_the_kb_websocket_refuses_bob_on_her_kb(world):
    bob_headers, alice_headers = [await database_sync_to_async(_headers)(user) for user in (world.bob, world.alice)]
    communicator, connected = await _connect(f"/ws/kb/{world.kb.slug}/", bob_headers)
    assert not connected
    # The controls: the same socket serves Bob the shared KB, and Alice her rows with their names.
    communicator, connected = await _connect(f"/ws/kb/{world.team_kb.slug}/", bob_headers)
    rows = await communicator.receive_from(timeout=5)
    assert connected and "handbook.md" in rows and not leaked(rows)
    await communicator.disconnect()
    communicator, connected = await _connect(f"/ws/kb/{world.kb.slug}/", alice_headers)
    assert connected and DOC_MARK in (await communicator.receive_from(timeout=5)).lower()
    await communicator.disconnect()
