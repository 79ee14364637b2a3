"""The embedded core: ``python -m gateway serve`` without ``--upstream`` runs ``modern_server`` in the same
event loop on a loopback ephemeral port, and the gateway points at it
(docs/design/reference-core.md#the-reference-core).

Authorization: the gateway passes the client's bearer token through to this core. That is not the forbidden
token-passthrough pattern (2025-11-25 basic/security_best_practices §Token Passthrough) because the embedded core
is part of the same deployment and shares the gateway's audience; with ``--upstream`` pointing elsewhere, the
operator must make sure the same holds.

The core's ``requestState`` key: every process on one shared session store must seal with the same key, or a
round one replica began and another took over fails ``requestState failed its integrity check`` at its next
retry. :func:`state_key` says where the key comes from: the core's own ``[[state_keys]]``, else
``[gateway] embedded_state_key_env``, else a key file created once (owner-only) in the state folder and read by
every process sharing that folder; :func:`shared_key_refusal` is the start-up line when a shared store's
processes would not share it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import secrets
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from aiohttp import web

from gateway.config.settings import GatewayConfig
from gateway.errors import UpstreamHopError
from modern_server.config import ConfigError as CoreConfigError
from modern_server.config import CoreConfig, StateKey
from modern_server.config import load_config as load_core_config

log = logging.getLogger("gateway.embedded")
CORE_DATABASE = "embedded-core.sqlite3"
EMBEDDED_SHUTDOWN_SECONDS = 0.5  # how long the core's handlers still running at exit are waited for
STATE_KEY_FILE = "embedded-state.key"
STATE_KEY_ID = "gw"  # the key id written into every state sealed with the gateway-provided key
FINGERPRINT_KEY = "embedded-state-key"  # under the store's prefix: which file key the store's processes use


class KeySource(Enum):
    CORE_CONFIG = "the core's [[state_keys]]"
    ENV = "[gateway] embedded_state_key_env"
    FILE = "a key file in the state folder"
    PROCESS = "a random key of this process"


@dataclass(frozen=True)
class SharedKey:
    """Where the embedded core's state key comes from; ``secret`` when the gateway hands it over."""

    source: KeySource
    secret: str | None = None
    where: str = ""


class StateKeyError(UpstreamHopError):
    """The configured state key cannot be used; the message is the operator's one line."""


def needs_embedded_core(config: GatewayConfig) -> bool:
    return config.upstream_url is None or any(u.url == "embedded" for u in config.pins.upstreams.values())


@asynccontextmanager
async def embedded_core(config: GatewayConfig) -> AsyncIterator[str | None]:
    """Yield the embedded core's loopback URL while it runs, or None when no upstream is ``embedded``."""
    if not needs_embedded_core(config):
        yield None
        return
    from modern_server.app import create_app as create_core

    with state_dir(config) as folder:
        # The gateway's access log is the one that matters; the core's internal requests are logged only when
        # asked for, under their own logger.
        access = logging.getLogger("modern_server.access") if config.embedded_access_log else None
        # The core stops after the gateway's own handlers ended: what still runs there serves no client any more,
        # and waiting for it (aiohttp's default is a minute) would hold the exit past shutdown_timeout_seconds.
        runner = web.AppRunner(create_core(embedded_settings(config, folder)), access_log=access,
                               shutdown_timeout=EMBEDDED_SHUTDOWN_SECONDS)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = runner.addresses[0][1]
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            await runner.cleanup()


def persistent_folder(config: GatewayConfig) -> Path | None:
    """``state_dir``, else beside the usage database (``serve`` keeps both, so notes outlive a restart), else
    None: a temporary folder (an app whose usage store is in memory, as in the tests)."""
    if config.state_dir is None and config.usage.db is None:
        return None
    return Path(config.state_dir or Path(config.usage.db or ".").resolve().parent)


@contextmanager
def state_dir(config: GatewayConfig) -> Iterator[Path]:
    """Where the embedded core keeps its database: :func:`persistent_folder`, else a temporary directory removed
    at exit (nothing is left behind)."""
    folder = persistent_folder(config)
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix="mcp-core-") as temporary:
        yield Path(temporary)


def state_key(config: GatewayConfig, env: Mapping[str, str]) -> SharedKey:
    """The embedded core's state key (module docstring); a key file is created here when there is none."""
    try:
        core = load_core_config(config.core_config)
    except CoreConfigError as exc:  # checked here first: serve's one line, not a traceback from the core's start
        raise StateKeyError(f"[gateway] core_config: {exc}") from None
    if core.state_keys:
        return SharedKey(KeySource.CORE_CONFIG, where=config.core_config or "")
    if config.embedded_state_key_env is not None:
        value = env.get(config.embedded_state_key_env)
        if not value:
            raise StateKeyError(f"[gateway] embedded_state_key_env names {config.embedded_state_key_env}, which is "
                                "not set (give it the same secret in every process on the store)")
        return SharedKey(KeySource.ENV, value, config.embedded_state_key_env)
    folder = persistent_folder(config)
    if folder is None:
        return SharedKey(KeySource.PROCESS)
    path = folder / STATE_KEY_FILE
    return SharedKey(KeySource.FILE, _key_file(path), str(path))


def _key_file(path: Path) -> str:
    """The key in ``path``, written first when missing: owner-only, and linked into place whole, so a process
    starting alongside (another worker) reads the same complete key, never a half-written one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        draft = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32) + "\n")
        try:
            with contextlib.suppress(FileExistsError):  # another process linked its key first: that one is used
                os.link(draft, path)
        finally:
            draft.unlink()
    try:
        key = path.read_text().strip()
    except OSError as exc:
        raise StateKeyError(f"embedded core state key {path}: cannot read it: {exc.strerror or exc}") from None
    if len(key) < 32:
        raise StateKeyError(f"embedded core state key {path}: too short (remove it to have a new one made)")
    return key


def fingerprint(secret: str) -> str:
    """What the store keeps of a file key: enough to tell two keys apart, nothing to seal with."""
    return hmac.new(secret.encode(), b"mcp-legacy-gateway embedded state key", hashlib.sha256).hexdigest()[:32]


async def shared_key_refusal(config: GatewayConfig, env: Mapping[str, str]) -> str | None:
    """The one start-up line when processes on a shared session store would seal with different keys, or None.
    A file key's fingerprint is kept in the store by the first process: a process with another file (another
    machine's state folder) is refused. A store that does not answer is not a refusal (the readiness check
    reports it)."""
    if not needs_embedded_core(config):
        return None
    try:
        key = state_key(config, env)
    except StateKeyError as exc:
        return str(exc)
    if config.store.url is None or key.source in (KeySource.CORE_CONFIG, KeySource.ENV):
        return None
    fix = ("set [gateway] embedded_state_key_env to a variable holding the same secret in every process, or "
           "[gateway] state_dir to a folder they all share")
    if key.source is KeySource.PROCESS or key.secret is None:
        return f"the embedded core on a shared session store needs a state key all its processes share: {fix}"
    stored = await _stored_fingerprint(config, fingerprint(key.secret))
    if stored is None or stored == fingerprint(key.secret):
        return None
    return (f"the embedded core's state key ({key.where}) is not the one the other processes on this store use: "
            f"{fix} (after changing the key on purpose, delete {config.store.prefix}{FINGERPRINT_KEY} in Redis)")


async def _stored_fingerprint(config: GatewayConfig, mine: str) -> str | None:
    """The store's fingerprint, set to ``mine`` when it had none; None when the store did not answer."""
    from redis.asyncio import Redis
    from redis.exceptions import RedisError

    client = Redis.from_url(config.store.url or "", socket_connect_timeout=config.store.timeout_seconds,
                            socket_timeout=config.store.timeout_seconds)
    name = f"{config.store.prefix}{FINGERPRINT_KEY}"
    try:
        await client.set(name, mine, nx=True)
        stored = await client.get(name)
    except (RedisError, OSError):
        log.warning("the session store did not answer: the embedded core's state key was not compared with "
                    "the other processes'")
        return None
    finally:
        await client.aclose()
    return stored.decode() if isinstance(stored, bytes) else stored


def embedded_settings(config: GatewayConfig, folder: Path) -> CoreConfig:
    """The core's own configuration (``core_config``), with its database under ``folder`` unless the file names
    one, and ``embedded_workspace`` added to the anonymous principal's workspaces, so the user's own roots (a
    client's ``roots/list``) are scanned rather than skipped."""
    core = load_core_config(config.core_config)
    updates: dict[str, object] = {}
    if core.public_url is None and config.public_base() is not None:
        updates["public_url"] = config.public_base()  # its pages are reached through the gateway (http.pages)
    if core.database is None:
        updates["database"] = str(folder / CORE_DATABASE)
    key = state_key(config, os.environ)
    if key.secret is not None:  # the processes on one store seal alike (module docstring)
        updates["state_keys"] = (StateKey(id=STATE_KEY_ID, secret=key.secret),)
    log.info("embedded core: requestState sealed with %s%s", key.source.value, f" ({key.where})" if key.where else "")
    anonymous = core.anonymous_principal
    if config.embedded_workspace and anonymous is not None:
        uri = Path(config.embedded_workspace).resolve().as_uri()
        held = core.workspaces.get(anonymous, ())
        updates["workspaces"] = {**core.workspaces, anonymous: held if uri in held else (*held, uri)}
    return core.model_copy(update=updates)
