"""``GET /migration``: the migration report as a self-contained page — server-rendered SVG charts, no
script, no CDN, refreshed by ``<meta http-equiv="refresh">`` — behind an admin token.

Owns the HTML/SVG rendering (also used by ``python -m gateway report --format html``) and the handler. Every
chart element carries its numbers as ``data-*`` attributes so a browser test (and a curious operator) can read
exactly what was drawn.

Admin token: taken from the environment variable named by ``[usage].admin_token_env`` (never from the file);
without it the page is disabled (403). Accepted as ``Authorization: Bearer``, or once as ``?token=``, which is
exchanged for an HttpOnly, SameSite=Strict cookie holding the token's SHA-256 and redirected away, so the
token does not stay in the address bar, the history or the refresh URL.
"""

from __future__ import annotations

from html import escape
from typing import Any

_W, _H, _PAD = 640, 180, 28
_CSS = """body{font:14px system-ui,sans-serif;margin:24px;color:#1d2330;background:#f6f7f9}
h1{font-size:20px}section.peer{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:16px;margin:16px 0}
.verdict{font-weight:600}.ready{color:#17803d}.blocked{color:#b42318}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #dde1e7;padding:4px 8px;text-align:left}svg{background:#fbfcfd;border:1px solid #eef0f3}
.legend span{display:inline-block;margin-right:12px}.sw{display:inline-block;width:10px;height:10px;margin-right:4px}"""
LEGACY_COLOR, MODERN_COLOR, FEATURE_COLOR, FAILURE_COLOR = "#d97706", "#2563eb", "#7c3aed", "#b42318"


def share_chart(peer: str, series: list[dict[str, Any]]) -> str:
    """Stacked bars per day: legacy (bottom) and modern requests."""
    peak = max([d["legacy"] + d["modern"] for d in series] + [1])
    step = (_W - 2 * _PAD) / max(len(series), 1)
    total_legacy, total_modern = sum(d["legacy"] for d in series), sum(d["modern"] for d in series)
    parts = [f'<svg class="chart share" data-peer="{escape(peer)}" data-legacy="{total_legacy}" '
             f'data-modern="{total_modern}" width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" role="img">',
             f'<title>Legacy vs modern requests per day ({escape(peer)})</title>']
    for i, day in enumerate(series):
        x, base = _PAD + i * step, _H - _PAD
        for kind, color in (("legacy", LEGACY_COLOR), ("modern", MODERN_COLOR)):
            height = (_H - 2 * _PAD) * day[kind] / peak
            parts.append(f'<rect class="bar {kind}" data-day="{day["day"]}" data-count="{day[kind]}" x="{x:.1f}" '
                         f'y="{base - height:.1f}" width="{max(step - 2, 1):.1f}" height="{height:.1f}" '
                         f'fill="{color}"><title>{day["day"]}: {day[kind]} {kind}</title></rect>')
            base -= height
    parts.append(f'<text x="{_PAD}" y="{_H - 8}" font-size="11">{escape(series[0]["day"] if series else "")}</text>')
    parts.append(f'<text x="{_W - _PAD}" y="{_H - 8}" font-size="11" text-anchor="end">'
                 f'{escape(series[-1]["day"] if series else "")}</text></svg>')
    return "".join(parts)


def bar_chart(peer: str, counts: dict[str, int], kind: str = "feature", color: str = FEATURE_COLOR) -> str:
    """Horizontal bars, one per name: deprecated features in use (``kind="feature"``) or failure causes."""
    rows = list(counts.items()) or [("none", 0)]
    peak, height = max([n for _, n in rows] + [1]), 22 * len(rows) + 10
    parts = [f'<svg class="chart {kind}s" data-peer="{escape(peer)}" width="{_W}" height="{height}" '
             f'viewBox="0 0 {_W} {height}" role="img"><title>{kind}s ({escape(peer)})</title>']
    for i, (name, count) in enumerate(rows):
        width = (_W - 220) * count / peak
        parts.append(f'<text x="8" y="{i * 22 + 20}" font-size="12">{escape(name)}</text>'
                     f'<rect class="bar {kind}" data-{kind}="{escape(name)}" data-count="{count}" x="180" '
                     f'y="{i * 22 + 8}" width="{width:.1f}" height="16" fill="{color}"></rect>'
                     f'<text x="{186 + width:.1f}" y="{i * 22 + 20}" font-size="12">{count}</text>')
    return "".join(parts) + "</svg>"


def _client_rows(clients: list[dict[str, Any]]) -> str:
    rows = ["<tr><th>client</th><th>versions</th><th>requests</th><th>legacy share</th><th>features</th>"
            "<th>failures</th><th>verdict</th></tr>"]
    for c in clients:
        failures = ", ".join(f"{k}: {v}" for k, v in c["failures"].items()) or "none"
        features = ", ".join(f"{k}: {v}" for k, v in c["features"].items()) or "none"
        rows.append(f'<tr class="client" data-client="{escape(c["client"])}" data-verdict="{escape(c["verdict"])}">'
                    f'<td>{escape(c["client"])}</td><td>{escape(", ".join(c["versions"]))}</td>'
                    f'<td>{c["requests"]}</td><td>{c["legacy_share"]:.0%}</td><td>{escape(features)}</td>'
                    f'<td>{escape(failures)}</td><td>{escape(c["verdict"])}</td></tr>')
    return "<table>" + "".join(rows) + "</table>"


def _peer_section(peer: dict[str, Any]) -> str:
    klass = "ready" if peer["verdict"] == "ready to cut over" else "blocked"
    sunset = (f'{peer["sunset"]} ({peer["days_until_sunset"]} days)' if peer["sunset"] else "none set")
    failures = ", ".join(f"{k}: {v}" for k, v in peer["failures"].items()) or "none"
    transports = ", ".join(f"{k}: {v}" for k, v in peer.get("transports", {}).items()) or "none"
    return (f'<section class="peer" data-peer="{escape(peer["peer"])}" data-requests="{peer["requests"]}" '
            f'data-legacy="{peer["legacy"]}" data-verdict="{escape(peer["verdict"])}">'
            f'<h2>Peer {escape(peer["peer"])}</h2>'
            f'<p class="verdict {klass}">{escape(peer["verdict"])}</p>'
            f'<p>{peer["requests"]} requests, {peer["legacy_share"]:.0%} legacy; sunset: {escape(sunset)}; '
            f'translation failures: <span class="failures">{escape(failures)}</span>; '
            f'transports: <span class="transports">{escape(transports)}</span></p>'
            f'<div class="legend"><span><i class="sw" style="background:{LEGACY_COLOR}"></i>legacy</span>'
            f'<span><i class="sw" style="background:{MODERN_COLOR}"></i>modern</span></div>'
            f'{share_chart(peer["peer"], peer["series"])}<h3>Deprecated features still in use</h3>'
            f'{bar_chart(peer["peer"], peer["features"])}<h3>Translation failures by cause</h3>'
            f'{bar_chart(peer["peer"], peer["failures"], "failure", FAILURE_COLOR)}'
            f'<h3>Clients</h3>{_client_rows(peer["clients"])}'
            "</section>")


def _reverse_section(upstreams: list[dict[str, Any]]) -> str:
    """The other direction: the 2025-era upstreams 2026 clients still reach through the reverse bridge."""
    rows = ["<tr><th>legacy upstream</th><th>requests</th><th>rounds</th><th>legacy features reached</th>"
            "<th>methods</th><th>clients</th><th>failures</th></tr>"]
    for up in upstreams:
        cells = [", ".join(f"{k}: {v}" for k, v in up[key].items()) or "none"
                 for key in ("inputs", "methods", "clients", "failures")]
        rows.append(f'<tr class="upstream" data-upstream="{escape(up["upstream"])}" data-requests="{up["requests"]}">'
                    f'<td>{escape(up["upstream"])}</td><td>{up["requests"]}</td><td>{up["rounds"]}</td>'
                    + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
    table = "<table>" + "".join(rows) + "</table>" if upstreams else "<p>None in this window.</p>"
    return f'<section id="reverse"><h2>Modern clients &rarr; legacy servers</h2>{table}</section>'


def _relayed_section(upstreams: list[dict[str, Any]]) -> str:
    """The 2025 clients relayed as they are to 2025-era upstreams (shown only when there are some)."""
    if not upstreams:
        return ""
    rows = ["<tr><th>legacy upstream</th><th>requests</th><th>errors</th><th>legacy features reached</th>"
            "<th>methods</th><th>clients</th></tr>"]
    for up in upstreams:
        cells = [", ".join(f"{k}: {v}" for k, v in up[key].items()) or "none"
                 for key in ("inputs", "methods", "clients")]
        rows.append(f'<tr class="relayed" data-upstream="{escape(up["upstream"])}" data-requests="{up["requests"]}">'
                    f'<td>{escape(up["upstream"])}</td><td>{up["requests"]}</td><td>{up["errors"]}</td>'
                    + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
    return (f'<section id="relayed"><h2>Legacy clients &rarr; legacy servers (relayed)</h2>'
            f'<table>{"".join(rows)}</table></section>')


def render_html(report: dict[str, Any], refresh_seconds: int | None = None) -> str:
    refresh = f'<meta http-equiv="refresh" content="{refresh_seconds}">' if refresh_seconds else ""
    body = "".join(_peer_section(p) for p in report["peers"]) or "<p>No traffic recorded in this window.</p>"
    body += _relayed_section(report.get("relayed", [])) + _reverse_section(report.get("reverse", []))
    return ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">" + refresh +
            f"<title>MCP migration progress</title><style>{_CSS}</style></head><body>"
            f'<h1>MCP migration progress</h1><p id="summary" data-days-until-removal="{report["days_until_removal"]}">'
            f'{report["today"]}: last {escape(report["window"])}. The deprecated features may be removed from '
            f'{report["removal_date"]} ({report["days_until_removal"]} days).</p>{body}</body></html>')
