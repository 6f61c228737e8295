"""In a real browser: a KB's settings page says whether automatic search uses the graph leg,
with the recall@10 its own evaluation measured with and without it."""

from __future__ import annotations

import os
from pathlib import Path

from playwright.sync_api import Page, expect

from .conftest import USERNAME, _manage
from .test_upload import log_in

# The verdict as `manage.py evaluate --judge-graph-leg` stores it: the page, not the
# evaluation, is under test.
SEED = """
from django.contrib.auth import get_user_model
from knowledge.models import KnowledgeBase

owner = get_user_model().objects.get(username={username!r})
KnowledgeBase.objects.create(
    slug="news-kb", name="News articles", owner=owner,
    retrieval_settings={{"graph_leg": {{"helps": False, "metric": "recall@10", "questions": 50,
                                       "hybrid": 0.297, "hybrid+graph": 0.23}}}},
)
KnowledgeBase.objects.create(slug="fresh-kb", name="Not measured", owner=owner)
"""


def seed(tmp_path_factory) -> None:
    # The server fixture serves the database of the session's "var" directory: seed that one.
    var_dir = next(path for path in tmp_path_factory.getbasetemp().glob("var*") if (path / "daphne.log").exists())
    env = {**os.environ, "VAR_DIR": str(var_dir), "EMBEDDER": "hashing-1024", "EMBEDDER_UPGRADE": ""}
    for name in ("REDIS_URL", "DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
        env.pop(name, None)
    _manage(env, "shell", "-c", SEED.format(username=USERNAME))


def test_the_settings_page_says_the_graph_leg_is_off_and_why(page: Page, tmp_path_factory, screenshots: Path):
    seed(tmp_path_factory)
    log_in(page)

    page.goto("/kb/news-kb/settings/")
    verdict = page.locator("#graph-leg")
    expect(verdict.get_by_role("heading", name="Graph leg in automatic search")).to_be_visible()
    expect(verdict.locator("[data-graph-leg=off]")).to_contain_text("0.297")
    expect(verdict.locator("[data-graph-leg=off]")).to_contain_text("0.23")
    verdict.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshots / "kb-settings-graph-leg-off.png"), full_page=True)

    page.goto("/kb/fresh-kb/settings/")
    expect(page.locator("#graph-leg")).to_contain_text("--judge-graph-leg")
