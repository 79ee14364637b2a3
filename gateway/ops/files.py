"""The files ``serve`` writes (pid file, usage database, trace, the embedded core's state folder): their folders
are made before anything is served, or start-up ends with one line naming the file, the folder and why.

A fresh checkout has no ``var/``, and the README's commands put files there: without this, each file failed in
its own way, late (a traceback at the pid file, another when the usage store first wrote, a dead trace thread
while ``/healthz`` said all was well).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from gateway.errors import OpsError


class FileRefused(OpsError):
    """A file ``serve`` cannot write; the message is the operator's one line."""


def make_folders(files: Iterable[tuple[str, str | None]]) -> None:
    """For each ``(what, path)`` with a path: its folder exists afterwards and this process may write in it."""
    for what, path in files:
        if path is not None:
            _writable_folder(Path(path).parent, f"{what} {path}: ")


def make_folder(what: str, folder: str | None) -> None:
    """A folder ``serve`` keeps files in (``state_dir``): it exists afterwards, or one line says why not."""
    if folder is not None:
        _writable_folder(Path(folder), f"{what} ")


def _writable_folder(folder: Path, blame: str) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FileRefused(f"{blame}cannot create the folder {folder}: {exc.strerror or exc}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise FileRefused(f"{blame}the folder {folder} is not writable by this user")


def write_pid_file(path: str) -> None:
    try:
        Path(path).write_text(f"{os.getpid()}\n")
    except OSError as exc:
        raise FileRefused(f"--pid-file {path}: cannot write it: {exc.strerror or exc}") from None
