from __future__ import annotations

from django.apps import AppConfig
from django.conf import settings


class ChatConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "chat"

    def ready(self) -> None:
        from .pipeline.tools import get_tool_channel
        from .tools import register_builtins

        register_builtins(get_tool_channel())
        if settings.MCP_SERVERS:  # imported only when used: the SDK is not light
            from .tools.mcp_client import register_mcp_tools

            register_mcp_tools(get_tool_channel(), settings.MCP_SERVERS)
