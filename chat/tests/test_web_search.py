"""Web search: the fetcher's refusals (no SSRF), the providers' bad answers, pages read into
passages, and the search of one query, against a fake SearXNG and fake pages on 127.0.0.1."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chat.web.testing import (
    UNRELATED_PAGE,
    ZORBLAX_PAGE,
    FakeWeb,
    endless_route,
    html_route,
    json_route,
    redirect_route,
    slow_route,
)
from chat.web import WebSearchConfig, WebSearcher
from chat.web.fetch import FetchPolicy, Fetched, Refused, WebError, check_url, fetch, is_domain_allowed, is_public
from chat.web.pages import page_passages
from chat.web.providers import parse_hits, provider_request
from knowledge.analysis import analyze

LOCAL = FetchPolicy(allow_hosts=("127.0.0.1",), total_timeout_s=5.0)


@pytest.fixture
def web():
    with FakeWeb() as server:
        yield server


def config_for(web: FakeWeb, **overrides) -> WebSearchConfig:
    defaults = dict(provider="searxng", base_url=web.base_url, allow_hosts=("127.0.0.1",), total_timeout_s=5.0)
    return WebSearchConfig(**{**defaults, **overrides})


# --- the fetcher ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://example.com/x",
        "gopher://example.com/",
        "http://127.0.0.1/",
        "http://localhost/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.1.2.3/",
        "http://192.168.0.1/",
        "http://0.0.0.0/",
        "http://user:secret@example.com/",
    ],
)
def test_it_refuses_other_schemes_credentials_and_inside_addresses(url):
    with pytest.raises(Refused):
        check_url(url, FetchPolicy(), resolve=lambda host, port: ["93.184.216.34"] if host == "example.com" else
                  [host.strip("[]")] if host[0].isdigit() or ":" in host else ["127.0.0.1"])


def test_every_address_of_a_host_is_checked_not_only_the_first():
    both = lambda host, port: ["93.184.216.34", "10.0.0.7"]  # noqa: E731
    with pytest.raises(Refused, match="10.0.0.7"):
        check_url("https://intranet.example.com/", FetchPolicy(), resolve=both)


def test_an_inside_host_on_the_allow_list_is_fetched(web):
    web.routes["/page"] = html_route(ZORBLAX_PAGE)
    fetched = fetch(web.url("/page"), LOCAL)
    assert fetched.status == 200 and b"7431" in fetched.body
    with pytest.raises(Refused, match="non-public"):
        fetch(web.url("/page"), FetchPolicy())
    assert web.hits["/page"] == 1  # the refused fetch sent nothing


def test_allow_and_deny_lists_cover_subdomains_and_deny_wins():
    assert is_domain_allowed("docs.python.org", ("python.org",), ())
    assert not is_domain_allowed("python.org.evil.com", ("python.org",), ())
    assert not is_domain_allowed("ads.python.org", ("python.org",), ("ads.python.org",))
    assert is_domain_allowed("anything.com", (), ("evil.com",))
    assert not is_domain_allowed("www.evil.com", (), ("evil.com",))


def test_public_means_global_unicast():
    assert is_public("93.184.216.34") and is_public("2606:4700::1111")
    assert not any(is_public(a) for a in ("127.0.0.1", "10.0.0.1", "172.16.0.1", "100.64.0.1", "fe80::1", "fc00::1", "224.0.0.1", "::ffff:10.0.0.1"))


def test_a_redirect_loop_is_refused(web):
    web.routes["/a"] = redirect_route("/b")
    web.routes["/b"] = redirect_route("/a")
    with pytest.raises(Refused, match="redirect loop"):
        fetch(web.url("/a"), LOCAL)


def test_redirects_are_capped(web):
    for i in range(6):
        web.routes[f"/r{i}"] = redirect_route(f"/r{i + 1}")
    with pytest.raises(Refused, match="more than 3 redirects"):
        fetch(web.url("/r0"), LOCAL)


@pytest.mark.parametrize("location", ["file:///etc/passwd", "http://10.255.255.1/admin", "http://evil.test/"])
def test_each_redirect_is_checked_again(web, location):
    web.routes["/go"] = redirect_route(location)
    policy = FetchPolicy(allow_hosts=("127.0.0.1",), deny_domains=("evil.test",), total_timeout_s=3.0)
    with pytest.raises(Refused):
        fetch(web.url("/go"), policy)


def test_a_huge_page_is_refused_at_its_cap_without_reading_it_all(web):
    web.routes["/declared"] = endless_route(declare=10**9)
    web.routes["/undeclared"] = endless_route()
    policy = FetchPolicy(allow_hosts=("127.0.0.1",), max_bytes=1_000_000, total_timeout_s=5.0)
    started = time.monotonic()
    with pytest.raises(Refused, match="1,000,000-byte cap"):
        fetch(web.url("/declared"), policy)
    with pytest.raises(Refused, match="1,000,000-byte cap"):
        fetch(web.url("/undeclared"), policy)
    assert time.monotonic() - started < 4.0


@pytest.mark.parametrize(
    ("content_type", "body"),
    [("application/octet-stream", b"\x7fELF\x00\x00"), ("image/png", b"\x89PNG\r\n"), ("text/html", b"<html>\x00\x01\x02</html>")],
)
def test_a_binary_page_is_refused(web, content_type, body):
    web.routes["/bin"] = (200, {"Content-Type": content_type}, body)
    with pytest.raises(Refused):
        fetch(web.url("/bin"), LOCAL)


def test_a_slow_server_is_given_up_on_within_the_timeouts(web):
    web.routes["/slow"] = slow_route(3.0, html_route(b"<p>late</p>"))
    policy = FetchPolicy(allow_hosts=("127.0.0.1",), read_timeout_s=0.5, total_timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(WebError, match="in time"):
        fetch(web.url("/slow"), policy)
    assert time.monotonic() - started < 2.0


# --- providers and pages -------------------------------------------------------------------


def test_searxng_and_brave_requests():
    searx = provider_request("searxng", "http://searx.local/", "端口 7431")
    assert searx.url == "http://searx.local/search?q=%E7%AB%AF%E5%8F%A3+7431&format=json" and searx.headers == {}
    brave = provider_request("brave", "", "zorblax port", api_key="k", count=50)
    assert brave.url.endswith("/web/search?q=zorblax+port&count=20") and brave.headers == {"X-Subscription-Token": "k"}
    with pytest.raises(WebError):
        provider_request("bing", "", "q")


def test_a_brave_answer_is_read_from_its_web_results():
    body = b'{"web": {"results": [{"url": "https://a.example/", "title": "A", "description": "d"}, {"url": "javascript:alert(1)"}]}}'
    hits = parse_hits("brave", Fetched("u", 200, "application/json", "utf-8", body), limit=5)
    assert [(h.url, h.title, h.snippet) for h in hits] == [("https://a.example/", "A", "d")]


def test_a_page_is_read_without_its_scripts_and_menus_into_passages():
    fetched = Fetched("https://zorblax.example/manual", 200, "text/html", "utf-8", ZORBLAX_PAGE)
    passages = page_passages(fetched, title="from the result")
    text = " ".join(p.text for p in passages)
    assert "listens on port 7431" in text
    assert "document.write" not in text and "Pricing" not in text and "Legal" not in text
    assert all(p.url == "https://zorblax.example/manual" and p.title == "Zorblax daemon manual" for p in passages)
    assert len({p.chunk_id for p in passages}) == len(passages) and all(p.chunk_id < 0 for p in passages)


# --- one query's search --------------------------------------------------------------------


def test_it_finds_the_passages_that_answer_the_query(web):
    web.routes["/zorblax"] = html_route(ZORBLAX_PAGE)
    web.routes["/garden"] = html_route(UNRELATED_PAGE)
    web.results("/garden", "/zorblax")
    findings = WebSearcher(config_for(web), analyze).search("Zorblax daemon port")
    assert findings.passages and findings.passages[0].url == web.url("/zorblax")
    assert "7431" in findings.passages[0].text and findings.scores[0] == 1.0
    assert all("Tomatoes" not in p.text for p in findings.passages)
    assert web.queries == ["Zorblax daemon port"]


def test_html_instead_of_json_is_a_clear_warning(web):
    web.routes["/search"] = html_route(b"<!doctype html><html><body>SearXNG</body></html>")
    findings = WebSearcher(config_for(web), analyze).search("zorblax")
    assert findings.passages == () and "answered HTML, not JSON" in findings.warnings[0]


def test_a_provider_that_times_out_costs_its_timeout_not_the_run(web):
    web.routes["/search"] = slow_route(4.0, json_route({"results": []}))
    config = config_for(web, read_timeout_s=0.5, total_timeout_s=1.0)
    started = time.monotonic()
    findings = WebSearcher(config, analyze).search("zorblax")
    assert time.monotonic() - started < 2.0
    assert findings.passages == () and "web search failed" in findings.warnings[0]


def test_ten_thousand_results_are_cut_to_the_cap(web):
    web.routes["/zorblax"] = html_route(ZORBLAX_PAGE)
    web.results(*["/zorblax"] + [f"/p{i}" for i in range(9_999)])
    searcher = WebSearcher(config_for(web, max_results=5, pages_per_query=2), analyze)
    findings = searcher.search("Zorblax daemon port")
    assert findings.hits == 5 and searcher.pages_fetched == 2
    assert sum(count for path, count in web.hits.items() if path != "/search") == 2
    assert findings.passages[0].url == web.url("/zorblax")


def test_an_answer_over_the_response_cap_is_refused(web):
    web.results(*[f"/p{i}" for i in range(10_000)])
    findings = WebSearcher(config_for(web, max_response_bytes=100_000), analyze).search("zorblax")
    assert findings.passages == () and "byte cap" in findings.warnings[0]


def test_domain_lists_drop_results_before_they_are_fetched(web):
    web.routes["/zorblax"] = html_route(ZORBLAX_PAGE)
    web.results("/zorblax")
    denied = WebSearcher(config_for(web, deny_domains=("127.0.0.1",)), analyze).search("Zorblax daemon port")
    only_elsewhere = WebSearcher(config_for(web, allow_domains=("example.org",)), analyze).search("Zorblax daemon port")
    assert denied.hits == only_elsewhere.hits == 0 and web.hits["/zorblax"] == 0


def test_refused_and_failing_pages_become_warnings_and_the_rest_still_count(web):
    web.routes["/zorblax"] = html_route(ZORBLAX_PAGE)
    web.routes["/loop"] = redirect_route("/loop")
    web.routes["/bin"] = (200, {"Content-Type": "application/octet-stream"}, b"\x00" * 10)
    web.results("/loop", "/bin", "/zorblax")
    findings = WebSearcher(config_for(web), analyze).search("Zorblax daemon port")
    assert findings.passages[0].url == web.url("/zorblax")
    assert any("redirect loop" in w for w in findings.warnings) and any("application/octet-stream" in w for w in findings.warnings)


def test_a_page_is_fetched_once_per_run(web):
    web.routes["/zorblax"] = html_route(ZORBLAX_PAGE)
    web.results("/zorblax")
    searcher = WebSearcher(config_for(web), analyze)
    searcher.search("Zorblax daemon port")
    searcher.search("Zorblax journal")
    assert web.hits["/search"] == 2 and web.hits["/zorblax"] == 1


def test_off_means_no_request_at_all(web):
    web.results("/zorblax")
    findings = WebSearcher(config_for(web, provider=""), analyze).search("zorblax")
    assert findings.warnings == ("web search is off",) and sum(web.hits.values()) == 0


def test_a_host_in_another_script_is_checked_in_its_ascii_form():
    seen = []
    target = check_url("https://例子.测试/页面", FetchPolicy(), resolve=lambda host, port: seen.append(host) or ["93.184.216.34"])
    assert seen == ["xn--fsqu00a.xn--0zwm56d"] and target.host == "xn--fsqu00a.xn--0zwm56d"
    assert target.path == "/%E9%A1%B5%E9%9D%A2"
    with pytest.raises(Refused):
        check_url("http://" + "a" * 70 + ".com/", FetchPolicy(), resolve=lambda host, port: ["93.184.216.34"])


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80), st.sampled_from(["http://", "https://", "file://", "", "HTTP://", "http://[", "http://a@"]))
def test_any_url_is_either_a_checked_target_or_a_web_error(tail, scheme):
    try:
        target = check_url(scheme + tail, FetchPolicy(), resolve=lambda host, port: ["93.184.216.34"])
    except WebError:
        return
    assert target.scheme in ("http", "https") and target.host and target.path.isascii()


def test_bad_urls_in_results_and_redirects_are_refused_not_raised(web):
    web.routes["/zorblax"] = html_route(ZORBLAX_PAGE)
    web.routes["/bad-redirect"] = redirect_route("http://[")
    web.routes["/search"] = json_route({"results": [
        {"url": "http://[", "title": "broken"}, {"url": web.url("/bad-redirect")}, {"url": web.url("/zorblax")},
    ]})
    findings = WebSearcher(config_for(web), analyze).search("Zorblax daemon port")
    assert findings.passages[0].url == web.url("/zorblax")
    assert any("not a URL" in w for w in findings.warnings) and any("bad URL" in w for w in findings.warnings)
