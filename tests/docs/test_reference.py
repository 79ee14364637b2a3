"""The reference pages under docs/reference/ cannot drift from the code: every configuration key the loader
accepts, every CLI subcommand and flag, every refusal of the status table and every metric family is named in
its page, and every configuration key a page names is one the loader accepts."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel

from adapters.errors import REJECTIONS
from gateway.config.pins import PeerConfig, PinsConfig, UpstreamConfig
from gateway.config.settings import GatewayConfig
from gateway.ops.cli import parser
from gateway.telemetry.metrics import Metrics

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference"
ROW = re.compile(r"^\| `([a-z0-9_]+)` \|", re.MULTILINE)


def _fields(model: type[BaseModel]) -> Iterator[tuple[str, type[BaseModel] | None]]:
    for name, field in model.model_fields.items():
        nested = field.annotation if isinstance(field.annotation, type) and issubclass(field.annotation,
                                                                                       BaseModel) else None
        yield name, nested


def _tables() -> dict[str, set[str]]:
    """Every table of the configuration file (as its page heading names it) -> the keys the loader accepts."""
    tables: dict[str, set[str]] = {}

    def add(title: str, model: type[BaseModel], skip: tuple[str, ...] = ()) -> None:
        for name, nested in _fields(model):
            if nested is None and name not in skip:
                tables.setdefault(title, set()).add(name)

    add("[gateway]", GatewayConfig)
    for name, nested in _fields(GatewayConfig):
        if nested is not None and name not in ("pins", "upstream_auth"):
            add(f"[gateway.{name}]", nested)
    credentials = "[gateway.upstream_auth] and [upstreams.NAME] credentials"
    add(credentials, GatewayConfig.model_fields["upstream_auth"].annotation)  # type: ignore[arg-type]
    add("[upstreams.NAME]", UpstreamConfig, skip=tuple(tables[credentials]))
    add("Top level: canary_seed", PinsConfig, skip=("peers", "upstreams", "tokens"))
    add("[[tokens]]", PinsConfig.model_fields["tokens"].annotation.__args__[0])  # type: ignore[union-attr]
    add("[[peers]] and [default_peer]", PeerConfig)
    add("[peers.bridge]", PeerConfig.model_fields["bridge"].annotation)  # type: ignore[arg-type]
    add("[peers.trace]", PeerConfig.model_fields["trace"].annotation)  # type: ignore[arg-type]
    return tables


def _sections(page: str) -> dict[str, str]:
    """The page's sections by heading, backquotes dropped: ``## `[gateway.store]` `` -> ``[gateway.store]``."""
    parts = re.split(r"^#{2,3} (.+)$", page, flags=re.MULTILINE)
    return {title.replace("`", "").strip(): body for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def test_every_configuration_key_is_in_the_reference_and_nothing_else() -> None:
    sections = _sections((REFERENCE / "configuration.md").read_text())
    for title, keys in _tables().items():
        assert title in sections, f"configuration.md has no section {title!r}"
        documented = set(ROW.findall(sections[title]))
        assert keys - documented == set(), f"{title}: keys the loader accepts but the page leaves out"
        assert documented - keys == set(), f"{title}: keys the page names but the loader refuses"


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices)


def test_every_subcommand_and_flag_is_in_the_cli_reference() -> None:
    sections = _sections((REFERENCE / "cli.md").read_text())
    for name, sub in _subcommands().items():
        assert name in sections, f"cli.md has no section {name!r}"
        for action in sub._actions:
            if action.help == argparse.SUPPRESS:  # internal (serve --reuse-port, set for each worker)
                continue
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in sections[name], f"cli.md, {name}: {flag} is not documented"


def test_every_refusal_of_the_status_table_is_in_the_error_reference() -> None:
    page = (REFERENCE / "errors.md").read_text()
    for reason, (status, code) in REJECTIONS.items():
        name = getattr(reason, "value", reason)
        row = re.search(rf"^\| `{name}` \| (\d+) \| `(-?\d+)` \|", page, re.MULTILINE)
        assert row is not None, f"errors.md: no row for {name}"
        assert (int(row[1]), int(row[2])) == (status, code), f"errors.md: {name} is {status} {code} in the code"


def test_every_metric_family_is_in_the_metrics_reference() -> None:
    page = (REFERENCE / "metrics.md").read_text()
    families = {metric.name for collector in Metrics().registry._collector_to_names for metric in collector.collect()}
    assert families
    for family in families:
        suffix = "_total" if re.search(rf"`{family}_total`", page) else ""
        assert f"`{family}{suffix}`" in page, f"metrics.md: {family} is not documented"
