"""The ``[gateway.usage]`` settings: where and how the migration-progress store is kept."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_DB = "gateway-usage.sqlite3"  # what ``serve`` and ``report`` use when nothing else is configured


class UsageConfig(BaseModel):
    """The ``[usage]`` section. ``db`` None keeps the store in memory (lost at exit); ``python -m gateway serve``
    defaults it to ``gateway-usage.sqlite3`` so a restart keeps the history."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    enabled: bool = True
    db: str | None = None
    retention_days: int = Field(400, ge=1)  # > a year: the report spans the whole migration to 2027-07-28
    flush_seconds: float = Field(5.0, gt=0)
    max_clients: int = Field(50, ge=1)
    max_versions_per_client: int = Field(10, ge=1)
    # clientInfo names /metrics labels besides adapters.usage.KNOWN_CLIENTS (an in-house client's name)
    known_clients: tuple[str, ...] = Field((), max_length=100)
    admin_token_env: str = "GATEWAY_ADMIN_TOKEN"  # the dashboard's token comes from this variable, never the file
    dashboard_refresh_seconds: int = Field(30, ge=1)
