"""Command-line values checked before a command prints or starts anything: ``--upstream URL`` (``serve``,
``stdio``, ``check``, ``replay``).

A value that cannot work is one line on stderr and exit 2, the way argparse refuses a bad flag, but without the
usage text: the operator sees what is wrong with the value and what is expected instead.
"""

from __future__ import annotations

from urllib.parse import urlsplit


def upstream_problem(url: str) -> str | None:
    """Why ``url`` cannot be a 2026-07-28 server's URL (an ``http``/``https`` URL naming a host), or None."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        if "://" not in url:
            hint = f" (did you mean 'http://{url}'?)" if ":" in url or "/" in url else ""
            return f"{url!r} is not a URL: give http://HOST:PORT/PATH or https://HOST/PATH{hint}"
        return f"{url!r}: the scheme must be http or https, not {parts.scheme!r}"
    if not parts.hostname:
        return f"{url!r} names no host: give http://HOST:PORT/PATH"
    try:
        parts.port  # noqa: B018 (a property that raises on a port out of range or not a number)
    except ValueError as exc:
        return f"{url!r}: {exc}"
    return None


def refuse_upstream(command: str, url: str | None) -> str | None:
    """The one-line refusal of ``command``'s ``--upstream``, or None when it is absent or usable."""
    if url is None:
        return None
    problem = upstream_problem(url)
    return None if problem is None else f"{command}: --upstream {problem}"
