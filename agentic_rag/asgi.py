"""ASGI entry point: HTTP through Django, websockets through Channels, both behind auth."""

from __future__ import annotations

import asyncio
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentic_rag.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from agentic_rag.background import remember_server_loop  # noqa: E402
from chat.routing import websocket_urlpatterns as chat_websockets  # noqa: E402
from knowledge.routing import websocket_urlpatterns as knowledge_websockets  # noqa: E402

router = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter([*knowledge_websockets, *chat_websockets]))
        ),
    }
)


async def application(scope, receive, send):
    """Serve a request, first recording the server's loop for in-process background tasks."""
    remember_server_loop(asyncio.get_running_loop())
    return await router(scope, receive, send)
