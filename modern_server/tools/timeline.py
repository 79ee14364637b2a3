"""``notes_timeline`` and its MCP Apps view ``ui://notes/timeline.html`` (extension io.modelcontextprotocol/ui).

The tool links its UI (``_meta.ui.resourceUri``) only for requests that declare the extension
(framework.Tool.describe); the call itself answers text plus ``structuredContent`` for everyone, so hosts
without Apps still get the data. Reading the UI resource without the extension is -32021 naming it. The page
bundles all its code (no remote scripts, every CSP domain list empty) and accepts ``postMessage`` only from the
exact host origin it was given (``hostOrigin`` query parameter, checked against ``event.origin``).
"""

from __future__ import annotations

from typing import Any

from modern_server.framework import UI_EXTENSION, UI_MIME, Context, ResourceFamily, Tool, arguments, text_result
from modern_server.tools.notes import _authorize_workspace, notes_in, workspaces

UI_URI = "ui://notes/timeline.html"

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Notes timeline</title>
<style>body{font:14px system-ui;margin:1rem}li{margin:.25rem 0}time{color:#666;margin-right:.5rem}</style>
</head><body><h1>Notes timeline</h1><ol id="timeline"></ol>
<script>
(function () {
  "use strict";
  var params = new URLSearchParams(location.search);
  var hostOrigin = params.get("hostOrigin");
  function render(notes) {
    var list = document.getElementById("timeline");
    list.textContent = "";
    notes.forEach(function (n) {
      var li = document.createElement("li"), t = document.createElement("time");
      t.textContent = n.created; li.appendChild(t); li.appendChild(document.createTextNode(n.title));
      list.appendChild(li);
    });
  }
  window.addEventListener("message", function (event) {
    if (!hostOrigin || event.origin !== hostOrigin) { return; }
    var msg = event.data || {};
    if (msg.method === "ui/notifications/tool-result" && msg.params && msg.params.structuredContent) {
      render(msg.params.structuredContent.notes || []);
    }
  });
  if (hostOrigin) {
    window.parent.postMessage({jsonrpc: "2.0", id: 1, method: "ui/initialize", params: {}}, hostOrigin);
  }
})();
</script></body></html>
"""


async def notes_timeline(ctx: Context) -> dict[str, Any]:
    uri = arguments(ctx).get("workspaceUri")
    spaces = [_authorize_workspace(ctx, uri)] if uri is not None else list(workspaces(ctx))
    notes = sorted({n.id: n for w in spaces for n in notes_in(ctx, w)}.values(), key=lambda n: (n.created, n.id))
    items = [{"id": n.id, "title": n.title, "created": n.created, "uri": n.uri} for n in notes]
    text = "\n".join(f"{n['created']}  {n['title']}" for n in items) or "(no notes)"
    return text_result(text, {"notes": items})


def _listing(ctx: Context) -> list[dict[str, Any]]:
    return [{"uri": UI_URI, "name": "Notes timeline", "mimeType": UI_MIME}]


async def _read(ctx: Context, uri: str) -> dict[str, Any] | None:
    if uri != UI_URI:
        return None
    ctx.require(ctx.declares_extension(UI_EXTENSION), {"extensions": {UI_EXTENSION: {"mimeTypes": [UI_MIME]}}},
                "ui:// resources are MCP Apps views; declare the io.modelcontextprotocol/ui extension")
    csp: dict[str, list[str]] = {"connectDomains": [], "resourceDomains": [], "frameDomains": [], "baseUriDomains": []}
    content = {"uri": UI_URI, "mimeType": UI_MIME, "text": PAGE, "_meta": {"ui": {"csp": csp, "permissions": {}}}}
    return {"contents": [content], "ttlMs": 60_000, "cacheScope": "public"}


UI_RESOURCES = ResourceFamily(_listing, _read)

TOOLS = (
    Tool("notes_timeline",
         "Show the notes of your workspaces in date order (with an interactive view in MCP Apps hosts).",
         {"type": "object", "properties": {"workspaceUri": {"type": "string"}}}, notes_timeline,
         title="Notes timeline", ui_resource=UI_URI, annotations={"readOnlyHint": True},
         output_schema={"type": "object", "properties": {"notes": {"type": "array"}}, "required": ["notes"]}),
)
