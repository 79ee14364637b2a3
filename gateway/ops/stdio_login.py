"""The stdio door's flags for its upstream: the user's login (``gateway.auth.login``) and extra headers; ``check``
takes the same flags, so one token folder serves both.

With ``--upstream URL`` (or the config file's upstream) the stdio process is the user's own OAuth client: when the
upstream answers 401 it logs in (``--grant``: the browser by default, device code for a headless machine, or
client credentials) and keeps the token in ``--token-dir`` (default: the user's configuration folder). No login
runs with ``--token-env`` (that token is sent as it is), with an ``Authorization`` among the extra headers (the
user's own static credential), with ``[gateway.upstream_auth]`` configured, or with ``--grant none``.

``--header 'Name: value'`` (repeatable) and ``--headers-file FILE`` (one ``Name: value`` a line) add headers to
every upstream request; the protocol's and the transport's own headers are refused
(``adapters.oauth_client.RESERVED_HEADERS``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from adapters.oauth_client import LoginGrant, has_authorization, parse_headers
from gateway.auth.login import LoginSettings, UserLogin, default_token_dir
from gateway.config.settings import GatewayConfig


@dataclass(frozen=True, slots=True)
class UpstreamSetup:
    """What the stdio process's upstream client is given: the user's login (or None) and the extra headers."""

    login: UserLogin | None = None
    headers: dict[str, str] = field(default_factory=dict)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("upstream login (OAuth) and headers")
    group.add_argument("--grant", choices=[g.value for g in LoginGrant], default=LoginGrant.AUTHORIZATION_CODE.value,
                       help="how to log in when the upstream asks for a token (default: authorization_code, "
                            "through the browser; device_code on a headless machine; none: never)")
    group.add_argument("--client-id", default=None, help="a client registered at the authorization server "
                                                         "(default: register one, RFC 7591, once per issuer)")
    group.add_argument("--client-secret-env", default=None, metavar="VAR",
                       help="the environment variable holding the client's secret (client_credentials)")
    group.add_argument("--scope", action="append", default=[], help="a scope to ask for (repeatable; default: "
                                                                    "the upstream's challenge or metadata)")
    group.add_argument("--token-dir", default=None, help="where tokens are kept, owner-only (default: "
                                                         "$XDG_CONFIG_HOME/mcp-legacy-gateway/tokens)")
    group.add_argument("--no-browser", action="store_true", help="print the login URL on stderr, open no browser")
    group.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'",
                       help="an extra header on every upstream request (repeatable)")
    group.add_argument("--headers-file", default=None, help="extra upstream headers, one 'Name: value' a line")


def upstream_setup(args: argparse.Namespace, config: GatewayConfig, environ: Mapping[str, str] = os.environ,
                   program: str = "gateway stdio") -> UpstreamSetup | str:
    """The upstream login and headers from these flags (the stdio door's, or ``check``'s: ``program`` names
    who says the login's lines), or why they cannot be used (one line)."""
    headers = _headers(args)
    if isinstance(headers, str):
        return headers
    grant = LoginGrant(args.grant)
    url = config.upstream_url
    if (url is None or grant is LoginGrant.NONE or args.token_env or has_authorization(headers)
            or config.upstream_auth.auth is not None):
        return UpstreamSetup(None, headers)
    login = _login(args, url, grant, headers, environ, program)
    return login if isinstance(login, str) else UpstreamSetup(login, headers)


def _login(args: argparse.Namespace, url: str, grant: LoginGrant, headers: dict[str, str],
           environ: Mapping[str, str], program: str) -> UserLogin | str:
    secret = environ.get(args.client_secret_env) if args.client_secret_env else None
    if args.client_secret_env and not secret:
        return f"the environment variable {args.client_secret_env} (--client-secret-env) is not set"
    if grant is LoginGrant.CLIENT_CREDENTIALS and not (args.client_id and secret):
        return "--grant client_credentials needs --client-id and --client-secret-env"
    folder = Path(args.token_dir) if args.token_dir else default_token_dir(dict(environ))
    return UserLogin(LoginSettings(url, folder, grant, args.client_id, secret, tuple(args.scope),
                                   open_browser=not args.no_browser, headers=tuple(headers.items()),
                                   program=program))


def _headers(args: argparse.Namespace) -> dict[str, str] | str:
    lines: list[tuple[str, list[str]]] = [("--header", list(args.header))]
    if args.headers_file:
        try:
            lines.append((args.headers_file, Path(args.headers_file).read_text().splitlines()))
        except (OSError, UnicodeDecodeError) as exc:
            return f"--headers-file {args.headers_file}: {exc}"
    found: dict[str, str] = {}
    for origin, text in lines:
        parsed = parse_headers(text, origin)
        if isinstance(parsed, str):
            return parsed
        found.update(parsed)
    return found


def login_argv(args: argparse.Namespace) -> list[str]:
    """These flags again, for ``--print-config`` (files by absolute path; a header's value as given)."""
    argv = [] if args.grant == LoginGrant.AUTHORIZATION_CODE.value else ["--grant", args.grant]
    for flag, value in (("--client-id", args.client_id), ("--client-secret-env", args.client_secret_env)):
        argv += [flag, value] if value else []
    for scope in args.scope:
        argv += ["--scope", scope]
    if args.token_dir:
        argv += ["--token-dir", os.path.abspath(args.token_dir)]
    if args.no_browser:
        argv.append("--no-browser")
    for header in args.header:
        argv += ["--header", header]
    if args.headers_file:
        argv += ["--headers-file", os.path.abspath(args.headers_file)]
    return argv
