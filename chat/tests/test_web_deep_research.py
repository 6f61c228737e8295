"""Web search in DeepSearch, the chat and the web_search tool, against a fake SearXNG and fake
pages on 127.0.0.1: web passages are cited with their URL and verified; off sends nothing."""

from __future__ import annotations

import pytest

from chat.deep_research import DeepResearchWorker
from chat.pipeline import ChatOptions, ChatRequest, run_chat
from chat.pipeline.stages import number_evidence
from chat.pipeline.tools import ToolCall, ToolRegistry
from chat.tests.conftest import ingest_docs
from chat.web.testing import UNRELATED_PAGE, ZORBLAX_PAGE, FakeWeb, html_route
from chat.tools import builtin_tools
from chat.web import web_search_config

# The rounds search side by side in threads, which see only committed rows.
pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "How does hybrid search fuse the rankings? Which port does the Zorblax daemon listen on?"


@pytest.fixture
def web():
    with FakeWeb() as server:
        server.routes["/zorblax"] = html_route(ZORBLAX_PAGE)
        server.routes["/garden"] = html_route(UNRELATED_PAGE)
        server.results("/garden", "/zorblax")
        yield server


@pytest.fixture
def web_on(web, settings):
    settings.WEB_SEARCH_PROVIDER = "searxng"
    settings.WEB_SEARCH_URL = web.base_url
    settings.WEB_FETCH_ALLOW_HOSTS = ["127.0.0.1"]
    return web


def deep_search(user, message, llm):
    options = ChatOptions(kb_slug="alice-kb", agent_type="deep_research_agent")
    return run_chat(ChatRequest(user, None, message, options), emit=lambda event: None, llm=llm)


def test_deep_search_cites_and_verifies_a_web_page(kb, alice, extractive, web_on):
    ingest_docs(kb)
    result = deep_search(alice, QUESTION, extractive)

    web_items = [e for e in result.evidence if e["source"] == "WEB"]
    assert web_items and web_items[0]["url"] == web_on.url("/zorblax")
    assert web_items[0]["doc"] == "Zorblax daemon manual"
    web_numbers = {e["n"] for e in web_items}
    cited = [c for c in result.citations if c["n"] in web_numbers]
    assert cited and all(c["verified"] and c["source"] == "WEB" for c in cited)
    assert "7431" in result.answer and "PWNED" not in result.answer
    assert any(e["source"] == "KB" for e in result.evidence)  # the KB part is still answered from the KB
    assert web_on.queries and web_on.hits["/zorblax"] == 1


def test_a_web_quote_not_in_the_page_is_not_verified(kb, alice, web_on):
    from chat.pipeline.citations import check_citations

    ingest_docs(kb)
    output = DeepResearchWorker(kb.slug).retrieve_with_trace("Which port does the Zorblax daemon listen on?")
    evidence = number_evidence(output["reference"], [], limit=5)
    web_item = next(item for item in evidence if item.source == "WEB")
    answer = (f'<cite doc_id="{web_item.n}" quote="The Zorblax daemon listens on port 7431 by default.">'
              f'It listens on 7431.</cite> <cite doc_id="{web_item.n}" quote="The daemon listens on port 80.">'
              "It listens on 80.</cite>")
    checked = check_citations(answer, evidence, "Which port does the Zorblax daemon listen on?")
    assert [c.verified for c in checked] == [True, False]


def test_off_by_default_deep_search_sends_nothing_to_the_web(kb, alice, extractive, web, settings):
    settings.WEB_SEARCH_URL = web.base_url  # an address, but no provider named: still off
    settings.WEB_FETCH_ALLOW_HOSTS = ["127.0.0.1"]
    ingest_docs(kb)
    assert not web_search_config().is_enabled
    result = deep_search(alice, QUESTION, extractive)
    assert result.status == "done" and all(e["source"] != "WEB" for e in result.evidence)
    assert sum(web.hits.values()) == 0


def test_the_saved_settings_replace_the_environment(kb, alice, extractive, web_on):
    from agentic_rag.models import WebSearchSettings

    WebSearchSettings.objects.create(enabled=False, base_url=web_on.base_url)
    ingest_docs(kb)
    deep_search(alice, QUESTION, extractive)
    assert sum(web_on.hits.values()) == 0


def test_result_pages_on_the_providers_own_inside_host_are_refused(kb, alice, extractive, web, settings):
    settings.WEB_SEARCH_PROVIDER = "searxng"
    settings.WEB_SEARCH_URL = web.base_url  # the provider may be asked …
    settings.WEB_FETCH_ALLOW_HOSTS = []  # … but its host's pages are not open to results
    ingest_docs(kb)
    result = deep_search(alice, QUESTION, extractive)
    assert web.hits["/search"] >= 1 and web.hits["/zorblax"] == 0
    assert all(e["source"] != "WEB" for e in result.evidence)


def test_the_web_search_tool_gives_web_evidence(web_on):
    tool = next(t for t in builtin_tools() if t.name == "web_search")
    result = ToolRegistry((tool,)).run(ToolCall("web_search", {"query": "Zorblax daemon port"}))
    assert result.ok and result.sources and web_on.url("/zorblax") in result.output
    evidence = number_evidence([], [result], limit=5)
    assert [item.source for item in evidence] == ["WEB"] * len(result.sources)
    assert evidence[0].url == web_on.url("/zorblax") and "7431" in evidence[0].text


def test_the_web_search_tool_says_when_it_is_off(web):
    tool = next(t for t in builtin_tools() if t.name == "web_search")
    result = ToolRegistry((tool,)).run(ToolCall("web_search", {"query": "Zorblax daemon port"}))
    assert result.ok and not result.sources and "off" in result.output
    assert sum(web.hits.values()) == 0


def test_the_chat_routes_a_web_search_request_to_the_tool(kb, alice, extractive, web_on):
    ingest_docs(kb)
    options = ChatOptions(kb_slug="alice-kb")
    result = run_chat(ChatRequest(alice, None, "search the web for the Zorblax daemon port", options),
                      emit=lambda event: None, llm=extractive)
    web_items = [e for e in result.evidence if e["source"] == "WEB"]
    assert web_items and web_items[0]["url"].startswith(web_on.url("/zorblax"))
    assert any(c["verified"] for c in result.citations if c["n"] == web_items[0]["n"])


def test_the_tool_ends_its_search_before_the_tool_timeout(web_on, settings):
    from chat.web.testing import json_route, slow_route

    web_on.routes["/search"] = slow_route(5.0, json_route({"results": []}))
    settings.WEB_SEARCH_TOTAL_TIMEOUT_S = 30.0
    settings.CHAT_NODE_TIMEOUTS_S = {**settings.CHAT_NODE_TIMEOUTS_S, "tools": 1.5}
    tool = next(t for t in builtin_tools() if t.name == "web_search")
    result = ToolRegistry((tool,)).run(ToolCall("web_search", {"query": "Zorblax daemon port"}))
    assert result.ok and result.ms < 1500 and "web search failed" in result.output
