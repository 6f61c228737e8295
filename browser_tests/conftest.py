"""A real server for the browser tests: a fresh SQLite database, daphne, in-process tasks.

Run apart from the main suite (Playwright's sync API and pytest-asyncio both want the loop):
    .venv/bin/python -m pytest browser_tests -p no:asyncio -q
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
USERNAME = "browser"
PASSWORD = "browser-password"
STAFF_USERNAME = "browser-staff"  # manages the language models
SCREENSHOTS = REPO / "artifacts" / "screenshots"
# Ask the local server directly, whatever proxy the environment names.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.exists():
        pytest.skip(
            f"no Chromium at {CHROMIUM}: install Debian's package (apt-get install chromium)"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Iterator[str]:
    """Serve the app on a free port from a migrated temporary VAR_DIR; yield its base URL."""
    daphne = Daphne(tmp_path_factory.mktemp("var"))
    daphne.start()
    try:
        yield daphne.base_url
    finally:
        daphne.stop()


@pytest.fixture
def restartable_server(tmp_path_factory) -> Iterator[Daphne]:
    """A server of the test's own, to stop and start again on the same port."""
    # Not "var…": tests that seed the session server's database find it by that name.
    daphne = Daphne(tmp_path_factory.mktemp("restartable"))
    daphne.start()
    try:
        yield daphne
    finally:
        daphne.stop()


class Daphne:
    """Daphne serving the app from a fresh VAR_DIR (migrated, with the test users) on one port."""

    def __init__(self, var_dir: Path) -> None:
        self.var_dir = var_dir
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        # The e5 upgrade of a KB's vectors takes minutes on CI machines; the page under test
        # does not depend on which vectors serve.
        self.env = {
            **os.environ, "VAR_DIR": str(var_dir), "BACKGROUND_TASKS": "thread", "DEBUG": "true",
            "EMBEDDER": "hashing-1024", "EMBEDDER_UPGRADE": "",
        }
        for name in ("REDIS_URL", "DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
            self.env.pop(name, None)
        _manage(self.env, "migrate", "--noinput")
        create_user = (
            "from django.contrib.auth import get_user_model; "
            f"get_user_model().objects.create_user({USERNAME!r}, password={PASSWORD!r}); "
            f"get_user_model().objects.create_user({STAFF_USERNAME!r}, password={PASSWORD!r}, is_staff=True)"
        )
        _manage(self.env, "shell", "-c", create_user)

    def start(self) -> None:
        """Start serving and return once the login page answers."""
        daphne = Path(sys.executable).with_name("daphne")
        command = [str(daphne), "-b", "127.0.0.1", "-p", str(self.port), "agentic_rag.asgi:application"]
        log = self.var_dir / "daphne.log"
        with open(log, "a") as output:
            self.process = subprocess.Popen(command, cwd=REPO, env=self.env, stdout=output, stderr=subprocess.STDOUT)
        _wait_until_up(self.base_url, self.process, log)

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None


@pytest.fixture
def page(browser, server):
    context = browser.new_context(base_url=server, viewport={"width": 1280, "height": 900}, locale="en-US")
    page = context.new_page()
    page.set_default_timeout(20_000)
    # Every page runs under the app's Content-Security-Policy: a blocked script, style or
    # connection is a bug the test must show.
    violations: list[str] = []
    page.on("console", lambda message: violations.append(message.text)
            if "Content Security Policy" in message.text or "Content-Security-Policy" in message.text else None)
    yield page
    context.close()
    assert not violations, violations


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS


def _manage(env: dict[str, str], *args: str) -> None:
    command = [sys.executable, "manage.py", *args]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    if result.returncode:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_until_up(
    base_url: str, process: subprocess.Popen, log: Path, timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"daphne exited with {process.returncode}:\n{log.read_text()}")
        try:
            with _DIRECT.open(f"{base_url}/login/", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.2)
    raise RuntimeError(f"daphne did not answer within {timeout}s:\n{log.read_text()}")
