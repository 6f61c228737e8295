"""A websocket load test of the chat: N sessions ask at once, on one or more server processes.

Each session is a real browser's path: a signed-in websocket on /ws/chat/, one question sent
as the chat form sends it, and the fragments read until the stored answer replaces the
streamed one. Reported: errors (refused, failed or broken sockets), lost answers (no final
fragment within the timeout), and the time to the first fragment and to the final one.

The servers are daphne processes started here on free ports, on this deployment's database
and channel layer, logging to VAR_DIR/bench-load-server-N.log (pass --url to aim at servers
already running instead).
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import os
import re
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from contextlib import nullcontext
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model

FINAL = 'hx-swap-oob="outerHTML:#turn-'  # the stored answer replacing the streamed one
FAILED = re.compile(r'class="alert (?:error msg-error|warning msg-toast)\b')  # an error, or a refusal
# A connect storm of hundreds overflows a listening socket's backlog (daphne's is 50) and
# the kernel resets the rest: that measures the backlog, not the chat.
CONNECTS_AT_ONCE = 20
QUESTIONS = (
    "What is the RRF constant?",
    "How are documents split into chunks?",
    "Which embedders can a knowledge base use?",
    "How does the quality gate decide?",
    "What does the rate limiter limit?",
)


@dataclass
class SessionOutcome:
    first_event_ms: float | None = None
    final_ms: float | None = None
    error: str = ""

    @property
    def lost(self) -> bool:
        return not self.error and self.final_ms is None


# --- servers -----------------------------------------------------------------------------


def start_servers(count: int, env: dict[str, str] | None = None) -> list[tuple[str, subprocess.Popen]]:
    """Start `count` daphne processes on free ports (this environment, or `env`); return their
    base URLs once they answer."""
    started = []
    for _ in range(count):
        port = _free_port()
        command = [str(Path(sys.executable).parent / "daphne"), "-b", "127.0.0.1", "-p", str(port),
                   "agentic_rag.asgi:application"]  # fmt: skip
        log = (settings.VAR_DIR / f"bench-load-server-{len(started) + 1}.log").open("wb")
        process = subprocess.Popen(command, cwd=settings.BASE_DIR, env=env or os.environ.copy(), stdout=log, stderr=log)
        log.close()  # the child holds its own copy
        started.append((f"http://127.0.0.1:{port}", process))
    for url, process in started:
        _wait_until_up(url, process)
    return started


def stop_servers(servers: list[tuple[str, subprocess.Popen]]) -> None:
    for _, process in servers:
        process.terminate()
    for _, process in servers:
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_until_up(url: str, process: subprocess.Popen, timeout: float = 60) -> None:
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"daphne on {url} exited with {process.returncode}")
        try:
            with direct.open(f"{url}/login/", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"daphne on {url} did not answer within {timeout:.0f} s")


# --- users -------------------------------------------------------------------------------


def session_cookies(count: int, prefix: str = "bench-load") -> list[str]:
    """Signed-in session cookies of `count` users (created when missing), as a browser sends them."""
    engine = import_module(settings.SESSION_ENGINE)
    cookies = []
    for number in range(count):
        user, _ = get_user_model().objects.get_or_create(username=f"{prefix}-{number}")
        session = engine.SessionStore()
        session[SESSION_KEY] = str(user.pk)
        session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
        session[HASH_SESSION_KEY] = user.get_session_auth_hash()
        session.create()
        cookies.append(f"{settings.SESSION_COOKIE_NAME}={session.session_key}")
    return cookies


# --- one session ---------------------------------------------------------------------------


async def ask_over_websocket(
    url: str, cookie: str, question: str, kb: str, timeout: float, *,
    connects: asyncio.Semaphore | None = None, ready: asyncio.Barrier | None = None,
) -> SessionOutcome:
    """Connect, wait for every session to be connected, ask once, and read until the final
    fragment, an error or the timeout. Times count from the question, not the connection."""
    outcome = SessionOutcome()
    writer = None
    try:
        async with connects or nullcontext():
            reader, writer = await open_websocket(url, "/ws/chat/", cookie, timeout)
    except (TimeoutError, OSError, ConnectionError) as error:
        outcome.error = f"connect: {error or type(error).__name__}"
    if ready is not None:
        await ready.wait()  # everyone asks at once, connected or not
    if outcome.error:
        if writer is not None:
            writer.close()
        return outcome
    started = time.perf_counter()
    try:
        payload = {"message": question, "session_id": "", "kb": kb, "agent_type": "auto",
                   "HEADERS": {"HX-Request": "true", "HX-Trigger": "chat-form"}}  # fmt: skip
        writer.write(_frame(json.dumps(payload).encode()))
        await writer.drain()
        deadline = started + timeout
        while outcome.final_ms is None:
            text = await asyncio.wait_for(read_text(reader, writer), max(0.01, deadline - time.perf_counter()))
            elapsed = (time.perf_counter() - started) * 1000
            if outcome.first_event_ms is None:
                outcome.first_event_ms = elapsed
            if failure := FAILED.search(text):
                outcome.error = "refused or failed: " + re.sub(r"<[^>]+>", "", text[failure.end():])[:80].strip()
                break
            if FINAL in text:
                outcome.final_ms = elapsed
    except TimeoutError:
        pass  # lost: no final fragment in time
    except (OSError, ConnectionError, ValueError) as error:
        outcome.error = f"socket: {error or type(error).__name__}"
    finally:
        writer.close()
    return outcome


async def open_websocket(url: str, path: str, cookie: str, timeout: float = 10) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A signed-in websocket on `path` of the server at `url`."""
    parts = urlsplit(url)
    reader, writer = await asyncio.wait_for(asyncio.open_connection(parts.hostname, parts.port), timeout)
    try:
        await _handshake(reader, writer, parts, cookie, timeout, path)
    except BaseException:
        writer.close()
        raise
    return reader, writer


async def _handshake(reader, writer, parts, cookie: str, timeout: float, path: str = "/ws/chat/") -> None:
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nOrigin: {parts.scheme}://{parts.netloc}\r\n"
        f"Cookie: {cookie}\r\n\r\n"
    )
    writer.write(request.encode())
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    status = head.split(b"\r\n", 1)[0].decode(errors="replace")
    if " 101 " not in status:
        raise ConnectionError(f"handshake refused: {status}")


def _frame(data: bytes, opcode: int = 0x1) -> bytes:
    """A masked client frame (RFC 6455 §5.2)."""
    mask = os.urandom(4)
    length = len(data)
    if length < 126:
        header = struct.pack("!BB", 0x80 | opcode, 0x80 | length)
    elif length < 1 << 16:
        header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, length)
    else:
        header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, length)
    return header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data))


async def read_text(reader, writer) -> str:
    """The next text message; pings are answered, a close is a ConnectionError."""
    message, opcode = b"", None
    while True:
        first, second = await reader.readexactly(2)
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", await reader.readexactly(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", await reader.readexactly(8))
        data = await reader.readexactly(length)
        kind = first & 0x0F
        if kind == 0x8:
            raise ConnectionError("the server closed the socket")
        if kind == 0x9:
            writer.write(_frame(data, opcode=0xA))
            continue
        if kind in (0x1, 0x2):
            opcode = kind
        message += data
        if first & 0x80 and opcode is not None:
            return message.decode(errors="replace")


# --- the run -------------------------------------------------------------------------------


async def run_sessions(urls: list[str], cookies: list[str], *, sessions: int, kb: str, timeout: float) -> list[SessionOutcome]:
    """Sessions connect CONNECTS_AT_ONCE at a time, as browsers arriving over a moment do, then
    all ask at once; spread over the servers and the users in turn."""
    connects, ready = asyncio.Semaphore(CONNECTS_AT_ONCE), asyncio.Barrier(sessions)
    tasks = [
        ask_over_websocket(
            urls[n % len(urls)], cookies[n % len(cookies)], QUESTIONS[n % len(QUESTIONS)], kb, timeout,
            connects=connects, ready=ready,
        )
        for n in range(sessions)
    ]
    return await asyncio.gather(*tasks)


def summarise(outcomes: list[SessionOutcome], *, servers: int, seconds: float) -> dict:
    first = sorted(o.first_event_ms for o in outcomes if o.first_event_ms is not None)
    final = sorted(o.final_ms for o in outcomes if o.final_ms is not None)
    errors = [o.error for o in outcomes if o.error]
    return {
        "sessions": len(outcomes),
        "servers": servers,
        "errors": len(errors),
        "lost": sum(o.lost for o in outcomes),
        "first_event_ms": _percentiles(first),
        "final_ms": _percentiles(final),
        "wall_s": round(seconds, 2),
        "error_examples": sorted(set(errors))[:3],
    }


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None}
    def at(share: float) -> float:
        return round(values[min(len(values) - 1, math.ceil(share * len(values)) - 1)], 1)
    return {"p50": at(0.50), "p99": at(0.99)}
