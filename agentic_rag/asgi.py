"""ASGI entry point: HTTP through Django, websockets through Channels, both behind auth."""

from __future__ import annotations

import asyncio
import logging
import os
import threading

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentic_rag.settings")
django_asgi_app = get_asgi_application()

from asgiref.sync import sync_to_async  # noqa: E402
from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402

from agentic_rag.background import (  # noqa: E402
    dispatch,
    remember_server_loop,
    start_sweeper,
    stop_background_work,
)
from agentic_rag.body_limit import BodyLimitMiddleware  # noqa: E402
from agentic_rag.locale import LocaleMiddleware  # noqa: E402
from agentic_rag.shutdown import start_watchdog, when_daphne_starts, when_daphne_stops  # noqa: E402
from chat.routing import websocket_urlpatterns as chat_websockets  # noqa: E402
from graphrag.tasks import resume_interrupted_graph_builds  # noqa: E402
from knowledge.routing import websocket_urlpatterns as knowledge_websockets  # noqa: E402
from knowledge.tasks import (  # noqa: E402
    resume_embedding_upgrades,
    resume_interrupted_ingestions,
    sweep_stalled_ingestions,
)

router = ProtocolTypeRouter(
    {
        "http": BodyLimitMiddleware(django_asgi_app),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(
                LocaleMiddleware(URLRouter([*knowledge_websockets, *chat_websockets]))
            )
        ),
    }
)


logger = logging.getLogger(__name__)
_started = False
_started_lock = threading.Lock()


def _is_first_start() -> bool:
    global _started
    with _started_lock:
        first, _started = not _started, True
    return first


def resume_background_work() -> None:
    """Resume the background work a restart or a CLI left, then sweep for dead runs on a timer."""
    if settings.BACKGROUND_TASKS == "inline":  # inline is for tests and commands
        return
    resumes = [resume_interrupted_ingestions, resume_interrupted_graph_builds]
    if settings.BACKGROUND_TASKS == "thread":  # this process's tasks died with the last one
        for resume in resumes:
            try:
                resume()
            except Exception:
                logger.exception("could not run %s", resume.__name__)
    try:
        dispatch(resume_embedding_upgrades)
    except Exception:  # a broker that is down must not stop the server; the next start retries
        logger.exception("could not resume embedding upgrades")
    start_sweeper(sweep_stalled_ingestions, settings.INGESTION_SWEEP_S)


def start_server() -> None:
    """As daphne starts serving: resume background work at once, not at the first request.

    Runs in the reactor's thread, whose event loop the in-process tasks report progress on,
    once that loop runs (tasks dispatched before would report on no loop). The database work
    goes to a thread of its own, as Django refuses it on a running loop.
    """
    loop = asyncio.get_event_loop()
    remember_server_loop(loop)
    if _is_first_start():
        resume = threading.Thread(target=resume_background_work, name="background-resume", daemon=True)
        loop.call_soon(resume.start)


async def on_first_request() -> None:
    """Resume background work on the first request of a server that has no start hook here.

    Daphne's start hook has done it already; another ASGI server gets here first.
    """
    if _is_first_start():
        await sync_to_async(resume_background_work, thread_sensitive=False)()


async def application(scope, receive, send):
    """Serve a request, first recording the server's loop for in-process background tasks."""
    remember_server_loop(asyncio.get_running_loop())
    if scope["type"] in ("http", "websocket"):
        await on_first_request()
    return await router(scope, receive, send)


def stop_server() -> None:
    """Stop background work at its next batch boundary, and exit by force after SHUTDOWN_GRACE_S.

    Daphne waits for every open request before it stops, and Python's exit for every
    thread: a request stuck in a thread would otherwise keep the process alive until SIGKILL.
    """
    stop_background_work("the server is stopping")
    start_watchdog(settings.SHUTDOWN_GRACE_S)


when_daphne_starts(start_server)
when_daphne_stops(stop_server)
