"""The core's tools, prompts and resources, one module each, assembled into one :class:`Registry`."""

from __future__ import annotations

from aiohttp import web

from modern_server.framework import Registry
from modern_server.tools import basic, build, connect, notes, prompts, summarize, timeline, workspace

routes = web.RouteTableDef()
connect.add_routes(routes)


def build_registry() -> Registry:
    registry = Registry()
    for module in (basic, summarize, notes, connect, workspace, timeline, build):
        for tool in module.TOOLS:
            registry.tools[tool.name] = tool
    for prompt in prompts.PROMPTS:
        registry.prompts[prompt.name] = prompt
    registry.resources.extend([timeline.UI_RESOURCES, notes.NOTE_RESOURCES])
    return registry
