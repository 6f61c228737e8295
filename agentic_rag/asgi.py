"""ASGI entry point: HTTP through Django, websockets through Channels, both behind auth."""

from __future__ import annotations

import asyncio
import logging
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentic_rag.settings")
django_asgi_app = get_asgi_application()

from asgiref.sync import sync_to_async  # noqa: E402
from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402

from agentic_rag.background import dispatch, remember_server_loop, stop_background_work  # noqa: E402
from agentic_rag.body_limit import BodyLimitMiddleware  # noqa: E402
from agentic_rag.locale import LocaleMiddleware  # noqa: E402
from agentic_rag.shutdown import start_watchdog, when_daphne_stops  # noqa: E402
from chat.routing import websocket_urlpatterns as chat_websockets  # noqa: E402
from graphrag.tasks import resume_interrupted_graph_builds  # noqa: E402
from knowledge.routing import websocket_urlpatterns as knowledge_websockets  # noqa: E402
from knowledge.tasks import resume_embedding_upgrades, resume_interrupted_ingestions  # noqa: E402

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


async def on_first_request() -> None:
    """Once per server process: resume the background work a restart or a CLI left."""
    global _started
    if _started:
        return
    _started = True
    if settings.BACKGROUND_TASKS == "inline":  # inline is for tests and commands
        return
    if settings.BACKGROUND_TASKS == "thread":  # this process's tasks died with the last one
        for resume in (resume_interrupted_ingestions, resume_interrupted_graph_builds):
            try:
                await sync_to_async(resume)()
            except Exception:
                logger.exception("could not run %s", resume.__name__)
    try:
        await sync_to_async(dispatch)(resume_embedding_upgrades)
    except Exception:  # a broker that is down must not fail the request; the next start retries
        logger.exception("could not resume embedding upgrades")


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


when_daphne_stops(stop_server)
