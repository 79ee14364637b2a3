"""``python -m bench.auth [--duration S] [--warmup S] [--slice S] [--concurrency 1,32] [--check]``.

What authorization costs the gateway, on the same translated call (a legacy ``tools/call echo`` through the
gateway to the reference core), every scenario interleaved in short slices as ``python -m bench`` does:

- ``translated`` against ``translated_auth``: a gateway without authorization, and one verifying a JWT access
  token on every request (``[gateway.auth]``). Each client keeps its token, as a real client does until it
  expires, so the steady state is a digest lookup. Target: gateway CPU at most 1.05 times.
- ``translated_padded``: the unauthenticated gateway's own process, its clients sending a header as long as
  ``Authorization: Bearer <token>`` that it ignores. It splits the ratio above in two: what the token's bytes
  cost (reading and parsing a longer request, which no gateway can avoid) and what checking it costs.
- ``translated_twin``: a second gateway without authorization, the same as the first. ``translated_auth`` runs in
  another process than ``translated``, and two identical processes on the 2-core host differ in CPU per request
  by what the scheduler does to each (at c=32, how often each is preempted); ``twin / unauthenticated`` is that
  difference, measured in the same run: the noise any cross-process ratio here carries (reported).
- ``translated_auth_cold``: a new token on every request, each paying a signature check (reported).
- ``forwarded`` against ``exchanged``: in front of a core that checks tokens itself (``[oauth]``), a gateway that
  passes the client's token on (one audience) and one that verifies it and sends the core a token exchanged for
  the core (RFC 8693, one exchange per subject, then cached). Reported.

This process is the authorization server: RFC 8414 metadata, a JWKS, a token endpoint for token exchange, and
tokens signed with PyJWT, so no other server is needed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

from bench.__main__ import Op, Stats, interleaved
from bench.clients import LegacyClient
from bench.procs import Child, scratch_usage_db

TARGET = 1.05
PUBLIC = "http://bench.invalid"  # the authenticated gateway's public URL: its /mcp is the tokens' audience


class Keys:
    """An issuer's key side on loopback: metadata and a JWKS with one RSA key, and tokens signed with it."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(65537, 2048)
        self.issuer = ""
        self.runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/.well-known/oauth-authorization-server", self._metadata)
        app.router.add_get("/jwks", self._jwks)
        app.router.add_post("/token", self._exchange)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.issuer = f"http://127.0.0.1:{port}"

    async def _metadata(self, request: web.Request) -> web.Response:
        return web.json_response({"issuer": self.issuer, "jwks_uri": f"{self.issuer}/jwks",
                                  "token_endpoint": f"{self.issuer}/token"})

    async def _exchange(self, request: web.Request) -> web.Response:
        """RFC 8693 at its smallest: a subject token this issuer signed becomes one for ``resource``."""
        form = await request.post()
        subject = jwt.decode(str(form["subject_token"]), self.key.public_key(), algorithms=["RS256"],
                             options={"verify_aud": False})
        token = self.token(subject["sub"], audience=str(form["resource"]))
        return web.json_response({"access_token": token, "token_type": "Bearer", "expires_in": 3600,
                                  "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"})

    async def _jwks(self, request: web.Request) -> web.Response:
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return web.json_response({"keys": [{**public, "kid": "bench", "use": "sig", "alg": "RS256"}]})

    def token(self, subject: str, audience: str = f"{PUBLIC}/mcp") -> str:
        now = int(time.time())
        claims = {"iss": self.issuer, "sub": subject, "aud": audience, "client_id": "bench",
                  "scope": "mcp:tools", "iat": now, "exp": now + 3600, "jti": f"{subject}-{time.perf_counter_ns()}"}
        return jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": "bench", "typ": "at+jwt"})


class BearerClient(LegacyClient):
    """The benchmark's legacy client with a bearer token; ``fresh`` mints a new one for every request."""

    def __init__(self, http: aiohttp.ClientSession, url: str, token: Callable[[], str], fresh: bool) -> None:
        super().__init__(http, url)
        self.mint, self.fresh, self.current = token, fresh, token()

    def _headers(self) -> dict[str, str]:
        if self.fresh:
            self.current = self.mint()
        return {**super()._headers(), "Authorization": f"Bearer {self.current}"}


class PaddedClient(LegacyClient):
    """The benchmark's legacy client sending, instead of a token, a header of the same name length and value
    length that the gateway ignores (it builds its upstream requests' headers itself)."""

    def __init__(self, http: aiohttp.ClientSession, url: str, length: int) -> None:
        super().__init__(http, url)
        self.padding = "x" * length

    def _headers(self) -> dict[str, str]:
        return {**super()._headers(), "X-Bench-Token": self.padding}


CORE = "http://bench-core.invalid/mcp"  # the checking core's resource: the audience its tokens must name


def gateway(core: Child, config: Path | None) -> Child:
    args = ["-m", "gateway", "serve", "--port", "{port}", "--upstream", core.url, "--no-access-log",
            "--usage-db", scratch_usage_db()]
    if config is not None:
        args += ["--config", str(config)]
    return Child("gateway", args)


def _files(folder: Path, issuer: str) -> dict[str, Path]:
    """The configurations: the checking gateway's, the exchanging gateway's, the checking core's."""
    auth = (f'[gateway]\npublic_url = "{PUBLIC}"\n\n[gateway.auth]\nauthorization_servers = ["{issuer}"]\n'
            'required_scopes = ["mcp:tools"]\n')
    files = {"auth": auth,
             "exchange": auth + f'\n[gateway.upstream_auth]\nauth = "token_exchange"\nissuer = "{issuer}"\n'
                                'client_id = "bench-gateway"\nclient_secret_env = "BENCH_GATEWAY_SECRET"\n'
                                f'resource = "{CORE}"\n',
             "core": f'[oauth]\nissuer = "{issuer}"\nresource = "{CORE}"\n'}
    for name, text in files.items():
        (folder / f"{name}.toml").write_text(text)
    return {name: folder / f"{name}.toml" for name in files}


async def run(args: argparse.Namespace) -> list[Stats]:
    keys = Keys()
    await keys.start()
    files = _files(Path(tempfile.mkdtemp(prefix="gateway-bench-auth-")), keys.issuer)
    os.environ["BENCH_GATEWAY_SECRET"] = "bench"  # the exchanging gateway's client secret (this server takes any)
    started: list[Child] = []
    try:
        core = _kept(started, Child("core", ["-m", "modern_server", "--port", "{port}", "--no-access-log"]))
        checking = _kept(started, Child("core-oauth", ["-m", "modern_server", "--port", "{port}", "--no-access-log",
                                                       "--config", str(files["core"])]))
        plain = _kept(started, gateway(core, None))
        front = {"translated": plain,
                 "translated_padded": plain,  # the same process: the only difference is the header's bytes
                 "translated_twin": _kept(started, gateway(core, None)),
                 "translated_auth": _kept(started, gateway(core, files["auth"])),
                 # A gateway of its own: the cold clients' verified tokens (one per request, up to the cache's
                 # bound) would otherwise sit in the steady-state gateway's heap and its collector's passes.
                 "translated_auth_cold": _kept(started, gateway(core, files["auth"])),
                 "forwarded": _kept(started, gateway(checking, None)),
                 "exchanged": _kept(started, gateway(checking, files["exchange"]))}
        results: list[Stats] = []
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            for conc in args.concurrency:
                ops = await _ops(http, front, keys, conc)
                results += await interleaved(ops, conc, args, front)
        return results
    finally:
        for child in reversed(started):
            child.stop()
        if keys.runner is not None:
            await keys.runner.cleanup()


def _kept(started: list[Child], child: Child) -> Child:
    started.append(child)
    return child


async def _ops(http: aiohttp.ClientSession, front: dict[str, Child], keys: Keys, conc: int) -> dict[str, list[Op]]:
    async def one(make: Callable[[int], LegacyClient], n: int) -> Op:
        client = make(n)
        await client.start()

        async def op() -> None:
            if not await client.call("echo", {"text": "hi"}):
                raise RuntimeError("echo through the gateway failed")
        return op

    async def each(make: Callable[[int], LegacyClient]) -> list[Op]:
        return list(await asyncio.gather(*(one(make, n) for n in range(conc))))

    def bearer(scenario: str, audience: str = f"{PUBLIC}/mcp", fresh: bool = False) -> Callable[[int], LegacyClient]:
        return lambda n: BearerClient(http, front[scenario].url, lambda: keys.token(f"{scenario}{n}", audience), fresh)

    length = len(f"Bearer {keys.token('translated_auth0')}")
    return {
        "translated": await each(lambda n: LegacyClient(http, front["translated"].url)),
        "translated_padded": await each(lambda n: PaddedClient(http, front["translated_padded"].url, length)),
        "translated_twin": await each(lambda n: LegacyClient(http, front["translated_twin"].url)),
        "translated_auth": await each(bearer("translated_auth")),
        "translated_auth_cold": await each(bearer("translated_auth_cold", fresh=True)),
        "forwarded": await each(bearer("forwarded", CORE)),  # the client's token is for the core itself
        "exchanged": await each(bearer("exchanged")),
    }


def report(results: list[Stats]) -> bool:
    """Print the table and the ratios; True when the target is met at every concurrency."""
    print(f"{'scenario':24} {'c':>3} {'requests':>9} {'p50 ms':>8} {'p99 ms':>8} {'gateway CPU us/req':>19}")
    for r in results:
        print(f"{r.scenario:24} {r.concurrency:>3} {r.requests:>9} {r.p50_ms:>8} {r.p99_ms:>8} "
              f"{r.front_cpu_us_per_request!s:>19}")
    met = True
    for conc in sorted({r.concurrency for r in results}):
        cpu = {r.scenario: r.front_cpu_us_per_request or 0.0 for r in results if r.concurrency == conc}
        warm, cold = cpu["translated_auth"] / cpu["translated"], cpu["translated_auth_cold"] / cpu["translated"]
        ok = warm <= TARGET
        met &= ok
        print(f"c={conc}: gateway CPU authenticated / unauthenticated {warm:.3f} (target <= {TARGET}: "
              f"{'met' if ok else 'MISSED'}); of it, the token's bytes (padded / unauthenticated) "
              f"{cpu['translated_padded'] / cpu['translated']:.3f} and the check (authenticated / padded) "
              f"{cpu['translated_auth'] / cpu['translated_padded']:.3f}; a new token every request {cold:.3f}; "
              f"exchanged / forwarded {cpu['exchanged'] / cpu['forwarded']:.3f} (reported); two identical "
              f"gateways (twin / unauthenticated) {cpu['translated_twin'] / cpu['translated']:.3f}, the noise of "
              "comparing two processes in this run (reported)")
    return met


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.auth", description=__doc__)
    parser.add_argument("--duration", type=float, default=4.0, help="measured seconds per scenario")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds per scenario not counted")
    parser.add_argument("--slice", type=float, default=0.5, help="seconds per scenario per alternating round")
    parser.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 32])
    parser.add_argument("--check", action="store_true", help="exit with status 1 when the target is missed")
    args = parser.parse_args()
    met = report(asyncio.run(run(args)))
    sys.exit(1 if args.check and not met else 0)


if __name__ == "__main__":
    main()
