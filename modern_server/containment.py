"""Workspace authorization: is a ``file://`` URI inside one of a principal's allowed workspaces?

Containment compares *path components* after percent-decoding and resolving ``.``/``..``, never string
prefixes: with ``file:///work/notes`` allowed, ``file:///work/notes-evil/secret.md`` (a prefix trick) and
``file:///work/notes/%2e%2e/private.md`` (an encoded traversal) are both outside. A decoded ``%2f`` counts as a
separator, so encoding cannot hide a component boundary. Anything unparseable is outside.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit


def components(uri: str) -> tuple[str, ...] | None:
    """The normalized path components of a local ``file://`` URI, or None when it is not one."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return None
    if parts.scheme != "file" or parts.netloc not in ("", "localhost") or parts.query or parts.fragment:
        return None
    try:
        path = unquote(parts.path, errors="strict")
    except UnicodeDecodeError:
        return None
    if "\x00" in path or not path.startswith("/"):
        return None
    normalized = posixpath.normpath(path)
    return tuple(c for c in normalized.split("/") if c)


def contains(workspace: str, uri: str) -> bool:
    base, target = components(workspace), components(uri)
    return base is not None and target is not None and target[: len(base)] == base


def allowed(workspaces: Iterable[str], uri: str) -> bool:
    return any(contains(w, uri) for w in workspaces)
