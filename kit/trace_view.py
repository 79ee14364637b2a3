"""Reading a translation trace: records grouped per legacy request, as a text summary or a self-contained HTML
page with one sequence diagram per request (legacy client | gateway | upstream; inline SVG, no script).

Pure: the records (``adapters.trace.trace_record``'s dicts) in, text out; ``gateway.ops.trace`` reads the file.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from html import escape
from typing import Any

from adapters.trace import Direction

ARROWS = {Direction.CLIENT_IN: "client  -> gateway ", Direction.CLIENT_OUT: "client <-  gateway ",
          Direction.UPSTREAM_OUT: "gateway  -> upstream", Direction.UPSTREAM_IN: "gateway <-  upstream"}
LANES = {Direction.CLIENT_IN: (0, 1), Direction.CLIENT_OUT: (1, 0), Direction.UPSTREAM_OUT: (1, 2),
         Direction.UPSTREAM_IN: (2, 1)}
LANE_X, ROW_H, TOP = (90, 400, 710), 34, 50


@dataclass(frozen=True, slots=True)
class Request:
    """One legacy request's records, in the order they were seen."""

    corr: str
    records: tuple[dict[str, Any], ...]

    @property
    def method(self) -> str:
        return next((r["method"] for r in self.records if r.get("method")), "?")

    @property
    def target(self) -> str | None:
        """What the request names beside its method: a tool's or prompt's name, a resource's URI (not content:
        traces keep them without ``--trace-content``)."""
        for record in self.records:
            params = (record.get("message") or {}).get("params") if record.get("method") else None
            if isinstance(params, dict):
                found = params.get("name", params.get("uri"))
                return found if isinstance(found, str) else None
        return None

    @property
    def title(self) -> str:
        """The method, and its target when it names one (``tools/call summarize_repo``)."""
        return f"{self.method} {self.target}" if self.target else self.method

    @property
    def duration_ms(self) -> float:
        return float(self.records[-1]["t_ms"] - self.records[0]["t_ms"])

    @property
    def failed(self) -> bool:
        return any(is_error(r) for r in self.records)


def is_error(record: dict[str, Any]) -> bool:
    return "error" in record or record.get("isError") is True


def group(records: list[dict[str, Any]], request: str | None = None) -> list[Request]:
    """Records per correlation id, in order of each request's first record; ``request``: only the ids equal to
    it or ending in ``/<request>`` (the downstream id alone)."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        grouped.setdefault(record["corr"], []).append(record)
    wanted = [c for c in grouped if request is None or c == request or c.endswith(f"/{request}")]
    return [Request(c, tuple(sorted(grouped[c], key=lambda r: r["t_ms"]))) for c in wanted]


# Besides the control characters (Unicode category Cc: C0, DEL, C1), the ones that reorder or split what a
# terminal shows: line and paragraph separators and the bidirectional embeddings, overrides and isolates.
_LAYOUT = frozenset("\u2028\u2029\u200e\u200f\u061c") | frozenset(map(chr, range(0x202A, 0x202F))) \
    | frozenset(map(chr, range(0x2066, 0x206A)))


def _escaped(ch: str) -> str:
    code = ord(ch)
    if code < 0x80:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def printable(text: str) -> str:
    """``text`` safe for a terminal: every control or layout character as an escape (``\\x1b``, ``\\u009b``),
    so a method name, error message or id chosen by a peer cannot move the cursor, retitle the window or hide
    a line. Everything else is kept as it is."""
    if text.isprintable():  # the usual case, checked in C
        return text
    return "".join(_escaped(ch) if unicodedata.category(ch) == "Cc" or ch in _LAYOUT else ch for ch in text)


def label(record: dict[str, Any]) -> str:
    """What one arrow says: the method or response, its id, the result kind, the error."""
    text = record.get("method") or "response"
    if record.get("id") is not None:
        text += f" #{record['id']}"
    if record.get("resultType"):
        text += f" [{record['resultType']}]"
    if "error" in record:
        said = record["error"].get("message")
        if isinstance(said, dict):  # digested: the client's own words (adapters.trace.client_words)
            said = f"<{said.get('len')} bytes, sha256 {said.get('sha256')}>"
        text += f" ERROR {record['error'].get('code')}: {said}"
    elif record.get("isError"):
        text += " isError"
    return text


def summary(requests: list[Request]) -> str:
    """A text block per request: a header, then one line per message (``!!`` marks an error); peer-chosen text
    (methods, ids, error messages, session ids) with its control characters escaped (:func:`printable`)."""
    lines: list[str] = []
    for req in requests:
        rounds = {r["round"] for r in req.records if r.get("round") is not None}
        state = "FAILED" if req.failed else "ok"
        lines.append(printable(f"== {req.corr}  {req.title}  {len(req.records)} messages, "
                               f"{len(rounds) or 1} round(s), {req.duration_ms:.1f} ms, {state}"))
        start = req.records[0]["t_ms"]
        for r in req.records:
            mark = "!!" if is_error(r) else "  "
            where = f"r{r['round']}" if r.get("round") is not None else "  "
            lines.append(printable(f"{mark} +{r['t_ms'] - start:9.1f} ms {where:>3} {ARROWS[Direction(r['dir'])]}  "
                                   f"{label(r)}"))
        lines.append("")
    return "\n".join(lines)


def _arrow(record: dict[str, Any], row: int) -> str:
    start, end = (LANE_X[i] for i in LANES[Direction(record["dir"])])
    y = TOP + row * ROW_H
    cls = "arrow error" if is_error(record) else "arrow"
    mid = (start + end) // 2
    return (f'<g class="{cls}"><line x1="{start}" y1="{y}" x2="{end}" y2="{y}" marker-end="url(#head)"/>'
            f'<text x="{mid}" y="{y - 6}">{escape(label(record))}</text></g>')


def _round_boxes(records: tuple[dict[str, Any], ...]) -> list[str]:
    """A shaded band behind each bridge round's rows, labelled with its number."""
    spans: dict[int, list[int]] = {}
    for row, r in enumerate(records):
        if r.get("round") is not None:
            spans.setdefault(r["round"], []).append(row)
    return [f'<g class="round"><rect x="20" y="{TOP + rows[0] * ROW_H - 22}" width="780" '
            f'height="{(rows[-1] - rows[0]) * ROW_H + 30}"/><text x="24" y="{TOP + rows[0] * ROW_H - 8}">'
            f'round {n}</text></g>' for n, rows in spans.items()]


def diagram(req: Request) -> str:
    """One request's sequence diagram: three lanes, a band per round, an arrow per record."""
    height = TOP + len(req.records) * ROW_H
    lanes = "".join(f'<line class="lane" x1="{x}" y1="20" x2="{x}" y2="{height}"/>'
                    f'<text class="lane" x="{x}" y="14">{name}</text>'
                    for x, name in zip(LANE_X, ("legacy client", "gateway", "upstream"), strict=True))
    body = "".join(_round_boxes(req.records)) + lanes + "".join(_arrow(r, i) for i, r in enumerate(req.records))
    state = "failed" if req.failed else "ok"
    return (f'<section class="request {state}" data-corr="{escape(req.corr)}"><h2>{escape(req.corr)} '
            f'{escape(req.title)} <small>{req.duration_ms:.1f} ms, {len(req.records)} messages</small></h2>'
            f'<svg width="820" height="{height + 10}" xmlns="http://www.w3.org/2000/svg">{body}</svg>'
            f'</section>')


_DEFS = ('<svg width="0" height="0"><defs>'
         '<marker id="head" markerWidth="8" markerHeight="8" refX="8" refY="4" orient="auto">'
         '<path d="M0,0 L8,4 L0,8 z"/></marker></defs></svg>')  # the one arrowhead every diagram uses
# Lanes: the dashed stroke is the line's only; their names are plain bold text (a stroke on text blurs it).
_STYLE = ("body{font-family:sans-serif}svg text{font-size:12px;text-anchor:middle}line{stroke:#333}"
          "line.lane{stroke:#bbb;stroke-dasharray:4}text.lane{font-weight:bold;fill:#333}"
          ".error line{stroke:#c00}.error text{fill:#c00}"
          ".round rect{fill:#eef3ff}.round text{text-anchor:start;fill:#669}section.failed h2{color:#c00}")


def html_page(requests: list[Request], title: str = "gateway trace") -> str:
    """A self-contained page (inline CSS and SVG, nothing fetched) with a diagram per request."""
    sections = "".join(diagram(req) for req in requests)
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{_STYLE}</style></head><body>{_DEFS}<h1>{escape(title)}</h1>{sections}</body></html>")
