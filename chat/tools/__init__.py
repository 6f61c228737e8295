"""The built-in tools of the chat's tool channel, registered at start-up (the demo tools stay
off while `CHAT_DEMO_TOOLS` is)."""

from __future__ import annotations

from django.conf import settings

from chat.pipeline.tools import Tool, ToolRegistry

from . import calculator, currency, demo, knowledge_lookup, system_metrics, web_search, world_clock

_NO_PARAMETERS = {"type": "object", "properties": {}}


def builtin_tools() -> tuple[Tool, ...]:
    """Every built-in tool, with the process's own clock, retriever and metrics."""
    return (
        Tool("calculator", "Evaluate an arithmetic expression safely.", calculator.handle, calculator.extract,
             calculator.PARAMETERS),
        Tool("datetime", "The current date and time in the named time zones.",
             world_clock.make_handler(default_zone=settings.TIME_ZONE), world_clock.extract,
             world_clock.PARAMETERS),
        Tool("currency", "Convert an amount between currencies with the stored rate table.", currency.handle,
             currency.extract, currency.PARAMETERS),
        Tool("system_metrics", "This deployment's request rate, latency, CPU, memory and queue depth.",
             system_metrics.make_handler(), system_metrics.extract, system_metrics.PARAMETERS),
        Tool("knowledge_lookup", "Search a knowledge base the user may read.", knowledge_lookup.make_handler(),
             knowledge_lookup.extract, knowledge_lookup.PARAMETERS, uses_context=True),
        Tool("web_search", "Search the web and read the result pages (when an administrator turned web search on).",
             web_search.make_handler(), web_search.extract, web_search.PARAMETERS),
        Tool("weather", "Demo weather by city (fixture data).", demo.handle_weather, demo.extract_weather,
             {"type": "object", "properties": {"city": {"type": "string"}}}, is_on=demo.is_on),
        Tool("sales", "Demo sales by quarter (fixture data).", demo.handle_sales, demo.extract_sales,
             {"type": "object", "properties": {"quarter": {"type": "string", "pattern": "^20\\d\\d-Q[1-4]$"}}},
             is_on=demo.is_on),
        Tool("ticket", "Demo support tickets by id or status (fixture data).", demo.handle_ticket, demo.extract_ticket,
             {"type": "object", "properties": {"id": {"type": "string"}, "status": {"type": "string"}}},
             is_on=demo.is_on),
    )


def register_builtins(registry: ToolRegistry) -> None:
    for tool in builtin_tools():
        registry.register(tool)
