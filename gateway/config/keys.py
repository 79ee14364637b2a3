"""Unknown configuration keys: which known key a misspelt one most likely meant (``check-config``, ``serve``).

Pydantic reports an unknown key as ``extra_forbidden`` at its path; this walks the model along that path to the
table the key sits in and asks difflib for the nearest of that table's keys.
"""

from __future__ import annotations

import difflib
import types
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
