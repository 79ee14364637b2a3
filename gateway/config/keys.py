"""Configuration problems in the operator's words (``check-config``, ``serve``, ``reload``).

Pydantic reports an unknown key as ``extra_forbidden`` at its path; this walks the model along that path to the
table the key sits in and asks difflib for the nearest of that table's keys. Its other messages are reworded
(``Input should be`` -> ``must be``, no ``Value error,``) and placed by name (``peer 'beta'``, not ``peers.1``).
Numbers and booleans are strict: pydantic's lax mode would take ``port = "19101"`` or ``enabled = "yes"``, which
in a TOML file is a mistake worth naming, so :func:`loose_values` walks the file's values along the model first.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Mapping
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel


def suggestion(root: type[BaseModel], loc: tuple[Any, ...], top_level: tuple[str, ...] = ()) -> str | None:
    """The nearest known key to ``loc[-1]`` in the table at ``loc[:-1]`` (``top_level`` adds keys known at the
    root), or None when nothing is close or the path leads to no table."""
    table = _table_at(root, loc[:-1])
    if table is None or not loc or not isinstance(loc[-1], str):
        return None
    known = [*table.model_fields, *(top_level if table is root else ())]
    close = difflib.get_close_matches(loc[-1], known, n=1, cutoff=0.6)
    return close[0] if close else None


def _table_at(node: Any, path: tuple[Any, ...]) -> type[BaseModel] | None:
    for part in path:
        if _is_model(node) and part in node.model_fields:
            node = node.model_fields[part].annotation
        else:  # an array index or a [name.*] key: step into the container's element
            node = _element(node)
    node = node if _is_model(node) else _element(node)
    return node if _is_model(node) else None


def _element(node: Any) -> Any:
    """The model inside ``X | None``, ``tuple[X, ...]``, ``list[X]`` or ``dict[str, X]``, else ``node``."""
    origin = get_origin(node)
    args = [a for a in get_args(node) if a is not type(None) and a is not Ellipsis]
    if origin in (Union, types.UnionType, tuple, list) and args:
        return next((a for a in args if _is_model(a)), args[0])
    if origin is dict and len(args) == 2:
        return args[1]
    return node


def _is_model(node: Any) -> bool:
    return isinstance(node, type) and issubclass(node, BaseModel)


Loc = tuple[Any, ...]


def loose_values(model: type[BaseModel], data: Any, loc: Loc = ()) -> list[tuple[Loc, str]]:
    """Every number or boolean of ``data`` (a table for ``model``) given as another type (a string, a boolean
    for a number, a fraction for an integer), with its key path and what was expected."""
    if not isinstance(data, Mapping):
        return []
    out: list[tuple[Loc, str]] = []
    for key, value in data.items():
        field = model.model_fields.get(key) if isinstance(key, str) else None
        if field is not None:
            out += _loose(field.annotation, value, (*loc, key))
    return out


def _loose(annotation: Any, value: Any, loc: Loc) -> list[tuple[Loc, str]]:
    kinds = _scalars(annotation)
    if kinds and value is not None:
        wrong = _wrong_scalar(kinds, value)
        return [(loc, wrong)] if wrong else []
    element, origin = _element(annotation), get_origin(annotation)
    if origin is dict and isinstance(value, Mapping):
        return [p for k, v in value.items() for p in _loose(element, v, (*loc, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _loose(element, v, (*loc, i))]
    return loose_values(element, value, loc) if _is_model(element) else []


def _scalars(annotation: Any) -> set[type]:
    """The strict scalar types of ``X`` or ``X | None`` (int, float, bool); empty for anything else."""
    options = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    found = {o for o in options if o in (int, float, bool)}
    return found if found and all(o in (int, float, bool, type(None)) for o in options) else set()


def _wrong_scalar(kinds: set[type], value: Any) -> str | None:
    if kinds == {bool}:
        return None if isinstance(value, bool) else f"must be true or false, not {_shown(value)}"
    if isinstance(value, (str, bool)) or not isinstance(value, (int, float)):
        return f"must be {'an integer' if float not in kinds else 'a number'}, not {_shown(value)}"
    if float not in kinds and isinstance(value, float):
        return f"must be an integer, not {value!r}"
    return None


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{type(value).__name__} {str(value)[:40]}"


def plain(error: Mapping[str, Any]) -> str:
    """A pydantic error's message in plain words (no location)."""
    message = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    if error["type"] == "missing":
        return "is required"
    message = message.replace("Input should be", "must be").replace("input should be", "must be")
    given = error.get("input")
    if error["type"].endswith(("_type", "_parsing")) and isinstance(given, (str, int, float, bool)):
        message += f", not {_shown(given)}"
    return message


def where(loc: Loc, pins: Mapping[str, Any]) -> str:
    """A key path as the operator finds it in the file: ``gateway.port``, ``peer 'beta'.canary``,
    ``upstreams.billing.url``; the file's top level is the empty string. ``pins``: the file's top-level tables."""
    parts = list(loc)
    if parts[:1] != ["pins"]:
        return ".".join(["gateway", *map(str, parts)])
    parts = parts[1:]
    if parts[:1] == ["peers"] and len(parts) > 1 and isinstance(parts[1], int):
        peers = pins.get("peers")
        table = peers[parts[1]] if isinstance(peers, list) and parts[1] < len(peers) else None
        name = table.get("name") if isinstance(table, Mapping) else None
        head = f"peer {name!r}" if isinstance(name, str) else f"peers[{parts[1]}] (no name)"
        return ".".join([head, *map(str, parts[2:])])
    return ".".join(map(str, parts))
