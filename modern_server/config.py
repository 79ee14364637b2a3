"""The core's configuration: one frozen pydantic model loaded from TOML, validated once at start.

Secrets (bearer tokens, state keys) are referenced by environment variable or stored as SHA-256 digests, so a
config file can be committed without them. With no file at all the core runs a development profile: the
anonymous principal may use ``file:///work/notes``, a state key is drawn at random per process (states do not
survive a restart), and notes live in a per-process temporary SQLite file.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import tempfile
import tomllib
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

DEFAULT_REPO_FILES = (
    "README.md", "pyproject.toml", "src/app/__init__.py", "src/app/cli.py", "src/app/core.py",
    "src/app/storage.py", "docs/architecture.md", "tests/test_core.py",
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TokenEntry(_Frozen):
    """A bearer token mapped to a principal: by digest in the file, or by an environment variable's value."""

    principal: str
    token_sha256: str | None = None
    token_env: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> TokenEntry:
        if (self.token_sha256 is None) == (self.token_env is None):
            raise ValueError("give exactly one of token_sha256 or token_env")
        return self


class StateKey(_Frozen):
    """A ``requestState`` HMAC key; ``id`` is the key id written into every state it seals."""

    id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,32}$")
    secret_env: str | None = None
    secret: str | None = Field(default=None, description="inline secret, for tests and local runs only")

    def resolve(self, env: Mapping[str, str]) -> bytes:
        value = env.get(self.secret_env) if self.secret_env else self.secret
        if not value:
            raise ValueError(f"state key {self.id!r}: no secret (set {self.secret_env or 'secret'})")
        return value.encode("utf-8")


class OAuthConfig(_Frozen):
    """``[oauth]``: the core accepts only JWT access tokens its ``issuer`` signed for ``resource`` (its own URL,
    the audience); see modern_server.oauth. The principal of a request is the token's ``sub``."""

    issuer: str = Field(pattern=r"^https?://")
    resource: str = Field(pattern=r"^https?://", description="the core's own /mcp URL, as its clients name it")
    jwks_uri: str | None = Field(default=None, pattern=r"^https?://")  # default: from the issuer's metadata
    scopes_supported: tuple[str, ...] = ()
    required_scopes: tuple[str, ...] = ()  # every token must hold these, else 403 insufficient_scope
    leeway_seconds: float = Field(default=30.0, ge=0, le=300)


def _default_workspaces() -> dict[str, tuple[str, ...]]:
    return {"anonymous": ("file:///work/notes",)}


class CoreConfig(_Frozen):
    server_name: str = "mcp-reference-core"
    server_version: str = "0.1.0"
    instructions: str = "Reference MCP 2026-07-28 server: repository summaries, notes and a notes timeline app."
    anonymous_principal: str | None = "anonymous"
    tokens: tuple[TokenEntry, ...] = ()
    state_keys: tuple[StateKey, ...] = ()
    state_ttl_seconds: float = Field(default=300.0, gt=0)
    max_rounds: int = Field(default=10, ge=1)
    database: str | None = None
    workspaces: dict[str, tuple[str, ...]] = Field(default_factory=_default_workspaces)
    seed_notes: bool = True
    repo_files: tuple[str, ...] = DEFAULT_REPO_FILES
    max_model_output_bytes: int = Field(default=4096, ge=64)
    public_url: str | None = None
    # streamable-http §Security (DNS rebinding): browser Origins trusted besides loopback and public_url's own.
    allowed_origins: tuple[str, ...] = ()
    oauth: OAuthConfig | None = None  # set: every request needs a JWT access token issued for this core
    # The tasks extension (modern_server.taskrun): how long a task is kept, the poll interval suggested to
    # clients, the bounds on tasks, and how long a process's claim on running a task lasts without renewal.
    task_ttl_seconds: float = Field(default=3600.0, gt=0, le=7 * 86400)
    task_poll_interval_ms: int = Field(default=1000, ge=50, le=60_000)
    max_active_tasks_per_principal: int = Field(default=16, ge=1)
    max_tasks: int = Field(default=1000, ge=1)
    task_lease_seconds: float = Field(default=15.0, gt=0)
    build_step_seconds: float = Field(default=1.0, ge=0, le=60)  # build_project: the time each build step takes

    @field_validator("anonymous_principal")
    @classmethod
    def _empty_is_none(cls, value: str | None) -> str | None:
        return value or None

    def database_path(self) -> str:
        return self.database or str(Path(tempfile.mkdtemp(prefix="mcp-core-")) / "core.sqlite3")

    def token_table(self, env: Mapping[str, str]) -> dict[str, str]:
        """sha256(token) -> principal, with env-referenced tokens hashed here so only digests are kept."""
        table: dict[str, str] = {}
        for entry in self.tokens:
            if entry.token_sha256 is not None:
                table[entry.token_sha256.lower()] = entry.principal
            elif token := env.get(entry.token_env or ""):
                table[hashlib.sha256(token.encode()).hexdigest()] = entry.principal
        return table

    def key_ring(self, env: Mapping[str, str]) -> tuple[dict[str, bytes], str]:
        if not self.state_keys:
            return {"dev": secrets.token_bytes(32)}, "dev"
        return {k.id: k.resolve(env) for k in self.state_keys}, self.state_keys[0].id


class ConfigError(Exception):
    """A configuration file that cannot be used; the message names the file, the key path and the problem."""


def load_config(path: str | os.PathLike[str] | None = None) -> CoreConfig:
    """Read and validate a TOML file; ``None`` gives the development profile."""
    if path is None:
        return CoreConfig()
    try:
        with open(path, "rb") as handle:
            return CoreConfig.model_validate(tomllib.load(handle))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(top level)'}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{path}: {problems}") from None
