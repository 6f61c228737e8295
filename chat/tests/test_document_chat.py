"""Document chat: routing, intent, query, skills (offline and against the fake server), the
SSE and JSON API, proposals accepted as new versions, permissions and bad input."""

from __future__ import annotations

import json

import pytest
from django.test import TestCase
from django.urls import reverse

from agentic_rag.llm.testing import FakeReply
from chat.document_chat.diff import word_diff
from chat.document_chat.intent import IntentResult, keyword_intent, normalise, recognize_intent
from chat.document_chat.offline_edit import propose
from chat.document_chat.proposals import ProposalError, accept_proposal
from chat.document_chat.query import MAX_KEYWORDS, MAX_QUERY_CHARS, build_keywords, build_query
from chat.document_chat.skills import SkillInput, run_answer_skill, run_modify_skill
from chat.document_chat.workflow import (
    EVENT_TYPES,
    Collaborators,
    DocChatRequest,
    DocChatState,
    SelectedSection,
    next_node,
    run_document_chat,
)
from chat.models import DocumentProposal, ProposalStatus, Trace
from chat.pipeline.state import EvidenceItem
from knowledge.editing import document_sections
from knowledge.ingest import submit_document
from knowledge.models import Document, KnowledgeBase, Visibility
from knowledge.retrieval import params_for_kb, retrieve
from knowledge.tasks import enqueue_ingestion

from .conftest import model_router

API = reverse("api-document-chat")

GUIDE = """# Operations guide

## 1 Circuit breaker

The circuit breaker opens when more than 10% of calls fail within the window. It stays open for five \
minutes, then lets one probe through. A probe that succeeds closes the breaker again. Operators see the \
state of every breaker on the status page. The window is sixty seconds long by default.

## 2 Retries

Retries wait 0.5 seconds times two to the power of the attempt. Authentication errors are never retried. \
At most ten attempts are made before the call fails.
"""
BREAKER_NOTES = """# Breaker notes

## Tuning

Raise the failure threshold of the circuit breaker to 20% for batch jobs that tolerate errors. The \
breaker state is exported as a metric named breaker_open for dashboards and alerts.
"""


def _ingest(kb, name: str, text: str) -> Document:
    with TestCase.captureOnCommitCallbacks(execute=True):
        outcome = submit_document(kb, name, text.encode(), enqueue=enqueue_ingestion)
    assert outcome.status == "queued", outcome
    return Document.objects.get(pk=outcome.document.pk)


@pytest.fixture
def guide(kb):
    _ingest(kb, "breaker-notes.md", BREAKER_NOTES)
    return _ingest(kb, "guide.md", GUIDE)


def _section(document: Document, title: str) -> SelectedSection:
    return SelectedSection.of(document, next(s for s in document_sections(document) if s.title == title))


def _run(user, document, section, message, *, llm=None, conversation_id="c1"):
    events: list[tuple[str, dict]] = []
    collaborators = Collaborators(llm=llm) if llm is not None else None
    request = DocChatRequest(user=user, message=message, section=section, document=document, conversation_id=conversation_id)
    data = run_document_chat(request, lambda event, payload: events.append((event, payload)), collaborators=collaborators)
    return data, events


# --- routing ------------------------------------------------------------------------------

SCOPED = SelectedSection(index="1", title="t", content="x", code="1:0")


@pytest.mark.parametrize(
    ("node", "state", "section", "expected"),
    [
        ("validate_input", DocChatState(), SelectedSection(content="x"), "general_answer"),
        ("validate_input", DocChatState(), SelectedSection(chapter_level_2="施工准备"), "load_context"),
        ("validate_input", DocChatState(), SCOPED, "load_context"),
        ("validate_input", DocChatState(error="bad"), SCOPED, "error_handler"),
        ("load_context", DocChatState(), SCOPED, "load_skill_registry"),
        ("load_skill_registry", DocChatState(), SCOPED, "recognize_intent"),
        ("recognize_intent", DocChatState(), SCOPED, "route_intent"),
        ("route_intent", DocChatState(intent=IntentResult("clarify", 0.5, "", "", True)), SCOPED, "clarify"),
        ("route_intent", DocChatState(intent=IntentResult("unsupported", 0.9, "", "")), SCOPED, "unsupported"),
        ("route_intent", DocChatState(intent=IntentResult("document_answer", 0.9, "document-answer", "answer")), SCOPED, "build_retrieval_query"),
        ("route_intent", DocChatState(intent=IntentResult("document_modify", 0.9, "document-modify", "condense")), SCOPED, "build_retrieval_query"),
        ("build_retrieval_query", DocChatState(), SCOPED, "vector_recall"),
        ("vector_recall", DocChatState(), SCOPED, "rerank_context"),
        ("vector_recall", DocChatState(error="search failed"), SCOPED, "error_handler"),
        ("rerank_context", DocChatState(), SCOPED, "quality_gate"),
        ("quality_gate", DocChatState(intent=IntentResult("document_answer", 0.9, "document-answer", "answer")), SCOPED, "run_answer_skill"),
        ("quality_gate", DocChatState(intent=IntentResult("document_modify", 0.9, "document-modify", "expand")), SCOPED, "run_modify_skill"),
        ("run_answer_skill", DocChatState(), SCOPED, "complete"),
        ("run_modify_skill", DocChatState(error="model failed"), SCOPED, "error_handler"),
        ("clarify", DocChatState(), SCOPED, "complete"),
        ("unsupported", DocChatState(), SCOPED, "complete"),
        ("general_answer", DocChatState(), SCOPED, "complete"),
        ("error_handler", DocChatState(error="x"), SCOPED, "complete"),
        ("complete", DocChatState(), SCOPED, None),
    ],
)
def test_the_routing_table(node, state, section, expected):
    assert next_node(node, state, section) == expected


# --- intent and query ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "intent", "operation"),
    [
        ("请精简这一节", "document_modify", "condense"),
        ("帮我扩写一下", "document_modify", "expand"),
        ("润色本节", "document_modify", "polish"),
        ("重写这段", "document_modify", "rewrite"),
        ("再写一版", "document_modify", "regenerate"),
        ("Condense this section", "document_modify", "condense"),
        ("Please expand it with more detail", "document_modify", "expand"),
        ("Rewrite this paragraph", "document_modify", "rewrite"),
        ("这一节怎么完善？", "document_answer", "answer"),
        ("这一节是什么意思", "document_answer", "answer"),
        ("What does the breaker do?", "document_answer", "answer"),
        ("breaker", "document_answer", "answer"),
    ],
)
def test_keyword_intent_in_chinese_and_english(message, intent, operation):
    result = normalise(keyword_intent(message))
    assert (result.intent, result.operation) == (intent, operation)


def test_the_keyword_default_is_an_answer_at_0_66_which_passes_the_bar():
    result = keyword_intent("breaker")
    assert result.confidence == 0.66
    assert normalise(result).intent == "document_answer"


def test_normalisation_trusts_the_skill_whitelists_it_and_clarifies_when_unsure():
    assert normalise(IntentResult("unsupported", 0.9, "document-answer", "answer", method="llm")).intent == "document_answer"
    assert normalise(IntentResult("document_answer", 0.9, "document-translate", "answer", method="llm")).skill_name == "document-answer"
    assert normalise(IntentResult("document_modify", 0.6, "document-modify", "rewrite", method="llm")).intent == "clarify"
    assert normalise(IntentResult("document_answer", 0.9, "document-answer", "answer", True, "llm")).intent == "clarify"


def test_intent_from_the_model_and_the_keyword_fallback_on_bad_json(fake_server):
    llm = model_router(fake_server)
    fake_server.reply('{"intent": "document_modify", "confidence": 0.93, "skill_name": "document-modify", "operation": "polish", "needs_clarification": false}')
    result = recognize_intent(llm, "make it nicer", "text", {})
    assert (result.intent, result.operation, result.method) == ("document_modify", "polish", "llm")
    fake_server.reply("I think the user wants something")  # not JSON, no fields
    result = recognize_intent(llm, "请精简这一节", "text", {})
    assert (result.intent, result.operation, result.method) == ("document_modify", "condense", "keywords")


def test_the_query_is_at_most_120_characters_from_at_most_20_keywords():
    content = "模板安装应符合 GB 50204-2015 的规定。" + "支架立杆间距、剪刀撑、扫地杆、连墙件、混凝土浇筑、钢筋绑扎、" * 10
    keywords = build_keywords("请把模板安装这一节精简一下", "", "2.1 模板安装", content, ["架桥机怎么验收"] * 8)
    assert len(keywords) <= MAX_KEYWORDS
    assert "GB 50204-2015" in keywords and "模板" in keywords and "架桥机" in keywords
    assert "精简" not in keywords  # an instruction, not a subject
    query = build_query("请把模板安装这一节精简一下", "", "2.1 模板安装", keywords)
    assert len(query) <= MAX_QUERY_CHARS and query.startswith("请把模板安装")


def test_keywords_come_from_the_last_six_turns_only():
    history = ["old topic zeppelin"] + [f"turn {n} about breakers" for n in range(6)]
    keywords = build_keywords("explain", "", "", "", history)
    assert "zeppelin" not in keywords and "breakers" in keywords


# --- skills -------------------------------------------------------------------------------

SECTION = GUIDE.split("## 1 Circuit breaker\n\n")[1].split("\n\n## 2")[0]
REFS = (EvidenceItem(1, "KB", "breaker-notes.md", BREAKER_NOTES.split("## Tuning\n\n")[1], doc_id=1, chunk_id=1, section="Tuning"),)


def test_offline_answer_is_extractive_and_cites(extractive):
    chunks: list[str] = []
    output = run_answer_skill(extractive, SkillInput("How long does the breaker stay open?", "answer", "1 Circuit breaker", SECTION, REFS), chunks.append)
    assert output.offline and "Extractive answer" in output.answer
    assert "five minutes" in output.answer
    assert "".join(chunks) == output.answer


def test_answer_from_the_model_json_and_its_fallback_chain(fake_server):
    llm = model_router(fake_server)
    request = SkillInput("How long does it stay open?", "answer", "1 Circuit breaker", SECTION, REFS)
    fake_server.reply('```json\n{"answer": "Five minutes [1].", "references": [1], "warnings": []}\n```')
    output = run_answer_skill(llm, request, lambda piece: None)
    assert (output.answer, output.offline, [r["n"] for r in output.references]) == ("Five minutes [1].", False, [1])
    fake_server.reply('{"answer": "It stays open for five minutes, then probes')  # cut-off JSON: the regex step
    output = run_answer_skill(llm, request, lambda piece: None)
    assert output.answer == "It stays open for five minutes, then probes"
    fake_server.reply("Plain words, no JSON at all.")
    assert run_answer_skill(llm, request, lambda piece: None).answer == "Plain words, no JSON at all."


def test_the_answer_skill_survives_a_model_that_times_out(fake_server):
    llm = model_router(fake_server, chunk_s=0.3)
    fake_server.script(FakeReply(text='{"answer": "never finished because the model stalls"}', stall_after=2, stall_s=3))
    output = run_answer_skill(llm, SkillInput("How long does the breaker stay open?", "answer", "1", SECTION, REFS), lambda p: None)
    assert output.offline and "five minutes" in output.answer
    assert any("stopped answering" in warning for warning in output.warnings)


def test_modify_with_the_model_and_a_regenerate_that_repeats_itself(fake_server):
    llm = model_router(fake_server)
    reply = json.dumps({"proposed_content": "The breaker opens above 10% failures.", "change_summary": "Shorter.", "warnings": []})
    fake_server.reply(reply)
    output = run_modify_skill(llm, SkillInput("Condense this section", "condense", "1", SECTION), lambda p: None)
    assert (output.proposed_content, output.change_summary, output.offline) == ("The breaker opens above 10% failures.", "Shorter.", False)
    again = SkillInput("regenerate", "regenerate", "1", SECTION, previous_proposal=output.proposed_content, previous_operation="condense")
    fake_server.reply(reply)
    repeated = run_modify_skill(llm, again, lambda p: None)
    assert any("close to the previous proposal" in w for w in repeated.warnings), repeated
    prompt = fake_server.chat_requests[-1].messages[-1]["content"]
    assert "<previous_proposal>The breaker opens above 10% failures.</previous_proposal>" in prompt


def test_modify_falls_back_to_rules_when_the_model_reply_has_no_content(fake_server):
    llm = model_router(fake_server)
    fake_server.reply("")
    output = run_modify_skill(llm, SkillInput("Condense this section", "condense", "1", SECTION), lambda p: None)
    assert output.offline and "Offline" in output.change_summary
    assert any("no proposed content" in w or "No model answered" in w for w in output.warnings)


def test_offline_condense_keeps_whole_sentences_in_order_and_says_so():
    edit = propose("condense", SECTION, [], language="en")
    assert not edit.refused and "Offline" in edit.summary
    assert len(edit.content) < len(SECTION)
    kept = [s for s in SECTION.replace(". ", ".\n").splitlines() if s in edit.content]
    assert kept and edit.content.startswith("The circuit breaker opens")
    assert [SECTION.index(s) for s in kept] == sorted(SECTION.index(s) for s in kept)


def test_offline_regenerate_differs_from_the_previous_proposal():
    first = propose("condense", SECTION, [], attempt=0, language="en")
    second = propose("condense", SECTION, [], attempt=1, avoid=first.content, language="en")
    assert not second.refused and second.content != first.content


def test_offline_expand_quotes_related_passages_with_their_source():
    edit = propose("expand", SECTION, [(REFS[0].text, "breaker-notes.md Tuning")], language="en")
    assert edit.content.startswith(SECTION.strip()) and "(breaker-notes.md Tuning)" in edit.content
    assert "breaker_open" in edit.content or "20%" in edit.content


def test_offline_rewording_is_refused_in_words():
    edit = propose("rewrite", SECTION, [], language="zh")
    assert edit.refused and "语言模型" in edit.summary and edit.content == ""


def test_a_chinese_and_english_word_diff():
    parts = word_diff("模板安装应符合规范要求。", "模板安装须符合规范。")
    assert [(p.op, p.text) for p in parts if p.op != "equal"] == [("delete", "应"), ("insert", "须"), ("delete", "要求")]
    parts = word_diff("The breaker opens when calls fail.", "The breaker opens when many calls fail.")
    assert [(p.op, p.text) for p in parts if p.op != "equal"] == [("insert", "many ")]


# --- the workflow -------------------------------------------------------------------------


def test_an_answer_runs_every_rag_node_and_streams_the_events_in_order(alice, guide):
    data, events = _run(alice, guide, _section(guide, "Circuit breaker"), "How long does the breaker stay open?")
    names = [name for name, _ in events]
    assert set(names) <= set(EVENT_TYPES)
    assert names[:2] == ["connected", "processing"] and names[-2:] == ["answer_completed", "completed"]
    assert names.index("intent") < names.index("retrieval_result") < names.index("skill_started") < names.index("chunk")
    nodes = [payload["stage_name"] for name, payload in events if name == "reasoning"]
    assert nodes == ["validate_input", "load_context", "load_skill_registry", "recognize_intent", "route_intent",
                     "build_retrieval_query", "vector_recall", "rerank_context", "quality_gate", "run_answer_skill", "complete"]
    assert data["response_type"] == "answer" and "five minutes" in data["answer"]
    retrieval = dict(events)["retrieval_result"]
    # The selected section is in the prompt already; references come from elsewhere.
    assert all(ref["section"] != "1 Circuit breaker" or ref["doc"] != "guide.md" for ref in retrieval["references"])
    trace = Trace.objects.get(trace_id=data["trace_id"])
    assert trace.route == "document-chat:alice-kb"
    assert [s.name for s in trace.spans.order_by("start_ms", "id")][:3] == ["validate_input", "load_context", "load_skill_registry"]


def test_a_modify_request_ends_with_a_stored_proposal_and_its_diff(alice, guide):
    data, events = _run(alice, guide, _section(guide, "Circuit breaker"), "Condense this section")
    assert [name for name, _ in events][-2:] == ["proposal_completed", "completed"]
    proposal = DocumentProposal.objects.get(pk=data["proposal"]["id"])
    assert proposal.status == ProposalStatus.PROPOSED and proposal.offline
    assert proposal.base_sha256 == guide.sha256
    assert any(part["op"] == "delete" for part in data["proposal"]["diff"])


def test_a_message_without_a_section_is_a_general_question_without_rag(alice):
    data, events = _run(alice, None, SelectedSection(), "What is the capital of France?")
    nodes = [payload["stage_name"] for name, payload in events if name == "reasoning"]
    assert nodes == ["validate_input", "general_answer", "complete"]
    assert data["response_type"] == "general" and "no language model" in data["answer"]


def test_the_general_path_uses_the_model_when_there_is_one(alice, fake_server):
    fake_server.reply("Paris.")
    data, _ = _run(alice, None, SelectedSection(), "What is the capital of France?", llm=model_router(fake_server))
    assert data["answer"] == "Paris."


def test_an_unclear_model_intent_asks_to_clarify(alice, guide, fake_server):
    fake_server.reply('{"intent": "document_answer", "confidence": 0.4, "skill_name": "document-answer", "operation": "answer", "needs_clarification": false}')
    data, events = _run(alice, guide, _section(guide, "Retries"), "hmm", llm=model_router(fake_server))
    assert data["response_type"] == "clarify"
    assert "retrieval_result" not in [name for name, _ in events]


def test_an_empty_message_is_an_error_event_then_completed(alice, guide):
    data, events = _run(alice, guide, _section(guide, "Retries"), "   ")
    names = [name for name, _ in events]
    assert names[-2:] == ["error", "completed"] and "answer_completed" not in names
    assert data["error"]["code"] == "empty_message"
    assert events[-1][1]["status"] == "failed"


def test_a_failing_node_goes_to_the_error_handler(alice, guide, extractive):
    def broken_search(*args, **kwargs):
        raise RuntimeError("index unavailable")

    request = DocChatRequest(alice, "How long does it stay open?", _section(guide, "Circuit breaker"), guide, "c1")
    events: list = []
    data = run_document_chat(request, lambda e, p: events.append(e), collaborators=Collaborators(llm=extractive, retrieve=broken_search))
    assert data["error"]["code"] == "internal" and "vector recall" in data["error"]["message"]
    assert events[-2:] == ["error", "completed"]


# --- accept, versions and re-indexing -------------------------------------------------------


def test_accept_writes_a_new_version_searchable_at_once_with_only_the_section_reindexed(alice, guide, monkeypatch):
    data, _ = _run(alice, guide, _section(guide, "Retries"), "Expand this section")
    proposal = DocumentProposal.objects.get(pk=data["proposal"]["id"])
    with TestCase.captureOnCommitCallbacks(execute=True):
        accepted = accept_proposal(proposal, alice)
    guide.refresh_from_db()
    assert accepted.status == ProposalStatus.ACCEPTED and accepted.accepted_version == guide.version == 2
    assert guide.live_version == 2
    added = proposal.proposed_content.split("\n\n")[-1]
    sections = {s.title: s for s in document_sections(guide)}
    assert added in sections["Retries"].source and sections["Circuit breaker"].source.strip() == _section_source(GUIDE, "Circuit breaker")
    job = guide.jobs.order_by("-started_at").first()
    # The Retries section's chunks (and the document's title parent) are new; the rest reuse vectors.
    assert job.reused_chunks > 0 and 0 < job.embedded_chunks < job.reused_chunks + job.embedded_chunks
    found = retrieve(added[:80], guide.kb, params_for_kb(guide.kb, top_k=3)).candidates
    assert any(c.doc_id == guide.pk and added[:40] in c.text for c in found)


def _section_source(text: str, title: str) -> str:
    return text.split(f"{title}\n\n")[1].split("\n\n## ")[0].strip()


def test_accepting_after_the_document_changed_is_a_conflict_that_loses_nothing(alice, guide):
    data, _ = _run(alice, guide, _section(guide, "Circuit breaker"), "Condense this section")
    proposal = DocumentProposal.objects.get(pk=data["proposal"]["id"])
    _ingest(guide.kb, "guide.md", GUIDE + "\n## 3 Timeouts\n\nEvery call has a timeout of thirty seconds.\n")
    with pytest.raises(ProposalError) as raised:
        accept_proposal(proposal, alice)
    assert raised.value.status == 409
    proposal.refresh_from_db()
    assert proposal.status == ProposalStatus.CONFLICT and proposal.proposed_content == data["proposal"]["proposed_content"]
    guide.refresh_from_db()
    assert guide.version == 2  # the concurrent upload, not the proposal


# --- the API ------------------------------------------------------------------------------


def _post(client, body: dict):
    return client.post(API, json.dumps(body), content_type="application/json")


def _sse_events(response) -> list[tuple[str, dict]]:
    text = b"".join(response.streaming_content).decode()
    events = []
    for block in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if "event" in lines:
            events.append((lines["event"], json.loads(lines["data"])))
    return events


@pytest.mark.django_db(transaction=True)
def test_the_api_streams_the_eleven_event_types_as_sse(alice_client, guide):
    body = {"message": "Condense this section", "document_id": guide.pk,
            "selected_section": {"code": f"{guide.pk}:1"}, "response_mode": "sse"}
    response = _post(alice_client, body)
    assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-cache" and response["X-Accel-Buffering"] == "no"
    events = _sse_events(response)
    names = [name for name, _ in events]
    assert set(names) <= set(EVENT_TYPES)
    assert names[0] == "connected" and events[0][1]["task_id"].startswith("doc_chat_")
    assert names[-2:] == ["proposal_completed", "completed"]


def test_the_api_answers_in_json_and_remembers_the_conversation(alice_client, guide):
    body = {"message": "How long does the breaker stay open?", "document_id": guide.pk,
            "selected_section": {"index": "1"}, "conversation_id": "conv-1"}
    response = _post(alice_client, body)
    assert response.status_code == 200, response.content
    data = response.json()
    assert data["response_type"] == "answer" and data["conversation_id"] == "conv-1"
    assert data["section"]["title"] == "Circuit breaker"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"message": "x", "document_id": 999999, "selected_section": {"index": "1"}}, 404, "unknown_document"),
        ({"message": "x", "document_id": "abc"}, 400, "bad_input"),
        ({"message": "x", "document_id": "{doc}", "selected_section": {"code": "{doc}:99"}}, 400, "unknown_section"),
        ({"message": "x", "document_id": "{doc}", "selected_section": {"code": "12345:0"}}, 400, "unknown_section"),
        ({"message": "", "document_id": "{doc}", "selected_section": {"index": "1"}}, 400, "empty_message"),
        ({"message": "x", "document_id": "{doc}", "selected_section": {"index": "1"}, "response_mode": "xml"}, 400, "bad_input"),
        ({"message": "x", "document_id": "{doc}", "selected_section": {"index": "1", "content": "y" * 20001}}, 400, "too_long"),
        ({"message": 5}, 400, "bad_input"),
    ],
)
def test_the_api_refuses_bad_input_clearly(alice_client, guide, body, status, code):
    body = json.loads(json.dumps(body).replace('"{doc}', f'"{guide.pk}').replace('{doc}', str(guide.pk)))
    response = _post(alice_client, body)
    assert (response.status_code, response.json()["code"] if "code" in response.json() else response.json()["error"]["code"]) == (status, code)


def test_the_api_refuses_a_body_that_is_not_json(alice_client):
    response = alice_client.post(API, "{not json", content_type="application/json")
    assert response.status_code == 400


def test_another_users_document_is_a_404_and_needs_sign_in(client, bob, guide):
    assert _post(client, {"message": "x"}).status_code == 401
    client.force_login(bob)
    response = _post(client, {"message": "How long?", "document_id": guide.pk, "selected_section": {"index": "1"}})
    assert response.status_code == 404


def test_a_reader_may_ask_but_not_accept(client, bob, alice, guide):
    kb = guide.kb
    kb.visibility = Visibility.PUBLIC
    kb.save()
    client.force_login(bob)
    response = _post(client, {"message": "Condense this section", "document_id": guide.pk, "selected_section": {"index": "1"}})
    assert response.status_code == 200
    proposal_id = response.json()["proposal"]["id"]
    accept = client.post(reverse("api-document-proposal", args=[proposal_id, "accept"]))
    assert accept.status_code == 403
    guide.refresh_from_db()
    assert guide.version == 1
    # Alice cannot act on Bob's proposal either: it is his.
    client.force_login(alice)
    assert client.post(reverse("api-document-proposal", args=[proposal_id, "accept"])).status_code == 404


def test_the_api_accepts_and_rejects_proposals(alice_client, guide):
    def propose_one() -> int:
        response = _post(alice_client, {"message": "Condense this section", "document_id": guide.pk, "selected_section": {"index": "1"}})
        return response.json()["proposal"]["id"]

    rejected = alice_client.post(reverse("api-document-proposal", args=[propose_one(), "reject"]))
    assert rejected.json()["status"] == "rejected"
    pk = propose_one()
    with TestCase.captureOnCommitCallbacks(execute=True):
        accepted = alice_client.post(reverse("api-document-proposal", args=[pk, "accept"]))
    assert accepted.json() == {"id": pk, "status": "accepted", "version": 2}
    assert alice_client.post(reverse("api-document-proposal", args=[pk, "accept"])).status_code == 409


def test_the_api_is_rate_limited(alice_client, guide, settings):
    settings.RATE_LIMIT_USER_QPS = 1
    body = {"message": "How long?", "document_id": guide.pk, "selected_section": {"index": "1"}}
    statuses = [_post(alice_client, body).status_code for _ in range(3)]
    assert 429 in statuses


# --- the editor page ----------------------------------------------------------------------


def test_the_editor_shows_the_outline_the_section_and_the_assistant(alice_client, guide):
    response = alice_client.get(reverse("document-editor", args=[guide.pk]) + "?section=2")
    assert response.status_code == 200
    page = response.content.decode()
    assert "Circuit breaker" in page and "Retries" in page
    assert "Retries wait 0.5 seconds" in page
    assert 'id="doc-ask"' in page


def test_the_editor_shows_a_long_section_in_part_and_a_long_outline_around_the_selection(alice_client, kb, settings):
    headings = "".join(f"## Part {n}\n\nBody {n}.\n\n" for n in range(1, 41))
    document = _ingest(kb, "long.md", f"# Long\n\n{'word ' * 400}\n\n{headings}")
    settings.DOCUMENT_PAGE_CHARS, settings.DOCUMENT_OUTLINE_ITEMS = 100, 10

    first = alice_client.get(reverse("document-editor", args=[document.pk])).content.decode()
    later = alice_client.get(reverse("document-editor", args=[document.pk]) + "?section=30")

    assert "data-section-cut" in first and first.count("word ") < 30
    shown = [section.position for section in later.context["sections"]]
    assert len(shown) == 10 and 30 in shown and shown == sorted(shown)
    assert "Part 29" in later.content.decode() and "Part 2\n" not in later.content.decode()


def test_the_editor_asks_and_accepts_without_javascript(alice_client, guide):
    url = reverse("document-assist", args=[guide.pk])
    response = alice_client.post(url, {"message": "Condense this section", "section": "1", "conversation_id": "abc"})
    assert response.status_code == 302 and "c=abc" in response["Location"]
    page = alice_client.get(response["Location"]).content.decode()
    assert "<del>" in page and "Accept" in page
    proposal = DocumentProposal.objects.get()
    with TestCase.captureOnCommitCallbacks(execute=True):
        response = alice_client.post(reverse("document-proposal-decide", args=[proposal.pk, "accept"]))
    assert response.status_code == 302
    guide.refresh_from_db()
    assert guide.version == 2


def test_the_editor_is_a_404_for_outsiders_and_bad_sections(client, bob, alice, guide):
    client.force_login(bob)
    assert client.get(reverse("document-editor", args=[guide.pk])).status_code == 404
    client.force_login(alice)
    assert client.get(reverse("document-editor", args=[guide.pk]) + "?section=99").status_code == 404
    assert client.post(reverse("document-assist", args=[guide.pk]), {"message": "x", "section": "99"}).status_code == 404


def test_a_reader_sees_no_accept_button(client, bob, guide):
    kb = KnowledgeBase.objects.get(pk=guide.kb_id)
    kb.visibility = Visibility.PUBLIC
    kb.save()
    client.force_login(bob)
    response = client.post(reverse("document-assist", args=[guide.pk]), {"message": "Condense this section", "section": "1", "conversation_id": "r1"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    page = response.content.decode()
    assert "<del>" in page and ">Accept<" not in page and ">Reject<" in page


def test_the_run_appears_in_the_trace_viewer(alice_client, guide):
    body = {"message": "How long does the breaker stay open?", "document_id": guide.pk, "selected_section": {"index": "1"}}
    trace_id = _post(alice_client, body).json()["trace_id"]
    page = alice_client.get(reverse("trace-detail", args=[trace_id])).content.decode()
    assert "quality_gate" in page and "run_answer_skill" in page


def test_the_benchmark_times_runs_and_counts_reused_vectors(guide, alice):
    from evaluation.document_chat_bench import bench_document_chat

    report = bench_document_chat(guide.kb, alice, runs=4)
    assert report["sections"] >= 1 and report["answer_p50_ms"] > 0
    assert report["reindex_documents"] >= 1 and report["reindex_reused_chunks"] > report["reindex_embedded_chunks"] > 0
    assert not KnowledgeBase.objects.filter(slug__startswith="bench-docchat-").exists()
    assert not DocumentProposal.objects.filter(document__kb=guide.kb).exists()


@pytest.mark.django_db(transaction=True)
async def test_the_api_streams_under_asgi_with_an_async_iterator(alice, guide):
    from django.test import AsyncClient

    client = AsyncClient()
    await client.aforce_login(alice)
    body = {"message": "How long does the breaker stay open?", "document_id": guide.pk,
            "selected_section": {"index": "1"}, "response_mode": "sse"}
    response = await client.post(API, json.dumps(body), content_type="application/json")
    assert response.status_code == 200 and response.is_async
    text = "".join([chunk.decode() if isinstance(chunk, bytes) else chunk async for chunk in response.streaming_content])
    names = [line.removeprefix("event: ") for line in text.splitlines() if line.startswith("event: ")]
    assert names[0] == "connected" and names[-2:] == ["answer_completed", "completed"]


def test_the_seed_log_events_carry_the_trace_id(alice, guide, caplog):
    caplog.set_level("INFO", logger="chat.document_chat")
    data, _ = _run(alice, guide, _section(guide, "Circuit breaker"), "How long does the breaker stay open?")
    events = [record.event for record in caplog.records if hasattr(record, "event")]
    assert events == ["request_received", "rag_query_built", "rag_recall_completed", "rag_rerank_completed",
                      "rag_quality_gate_completed", "final_content_generated", "response_completed"]
    assert {record.trace_id for record in caplog.records if hasattr(record, "event")} == {data["trace_id"]}


def test_a_failed_run_logs_request_failed(alice, guide, caplog):
    caplog.set_level("INFO", logger="chat.document_chat")
    _run(alice, guide, _section(guide, "Retries"), "")
    assert "request_failed" in [getattr(record, "event", "") for record in caplog.records]
