"""``python -m bench.auth [--duration S] [--warmup S] [--slice S] [--concurrency 1,32] [--check]``.

What checking tokens at the doors (``[gateway.auth]``) costs the gateway: the same translated call (a legacy
``tools/call echo`` through the gateway to the reference core) on two gateways side by side, interleaved in short
slices as ``python -m bench`` does, one without authorization and one verifying a JWT access token on every
request. Each client keeps its token, as a real client does until it expires, so the steady state is a digest
lookup; ``translated_auth_cold`` sends a new token on every request (each pays a signature check), reported for
scale, not judged.

The signing keys are served by this process (RFC 8414 metadata and a JWKS on loopback) and the tokens signed
with PyJWT here, so no authorization server is needed. Target: gateway CPU per authenticated call at most 1.05 times per
unauthenticated one (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.issuer = f"http://127.0.0.1:{port}"

    async def _metadata(self, request: web.Request) -> web.Response:
        return web.json_response({"issuer": self.issuer, "jwks_uri": f"{self.issuer}/jwks"})

    async def _jwks(self, request: web.Request) -> web.Response:
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return web.json_response({"keys": [{**public, "kid": "bench", "use": "sig", "alg": "RS256"}]})

    def token(self, subject: str) -> str:
        now = int(time.time())
        claims = {"iss": self.issuer, "sub": subject, "aud": f"{PUBLIC}/mcp", "client_id": "bench",
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


def gateway(core: Child, config: str | None) -> Child:
    args = ["-m", "gateway", "serve", "--port", "{port}", "--upstream", core.url, "--no-access-log",
            "--usage-db", scratch_usage_db()]
    if config is not None:
        args += ["--config", config]
    return Child("gateway-auth" if config else "gateway", args)


async def run(args: argparse.Namespace) -> list[Stats]:
    keys = Keys()
    await keys.start()
    folder = Path(tempfile.mkdtemp(prefix="gateway-bench-auth-"))
    config = folder / "auth.toml"
    config.write_text(f'[gateway]\npublic_url = "{PUBLIC}"\n\n[gateway.auth]\n'
                      f'authorization_servers = ["{keys.issuer}"]\nrequired_scopes = ["mcp:tools"]\n')
    core = Child("core", ["-m", "modern_server", "--port", "{port}", "--no-access-log"])
    plain, authed = gateway(core, None), gateway(core, str(config))
    results: list[Stats] = []
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            for conc in args.concurrency:
                ops = await _ops(http, plain, authed, keys, conc)
                front = {"translated": plain, "translated_auth": authed, "translated_auth_cold": authed}
                results += await interleaved(ops, conc, args, front, core)
    finally:
        for child in (plain, authed, core):
            child.stop()
        if keys.runner is not None:
            await keys.runner.cleanup()
    return results


async def _ops(http: aiohttp.ClientSession, plain: Child, authed: Child, keys: Keys, conc: int) -> dict[str, list[Op]]:
    async def one(make: Callable[[int], LegacyClient], n: int) -> Op:
        client = make(n)
        await client.start()

        async def op() -> None:
            if not await client.call("echo", {"text": "hi"}):
                raise RuntimeError("echo through the gateway failed")
        return op

    def each(make: Callable[[int], LegacyClient]) -> Any:
        return asyncio.gather(*(one(make, n) for n in range(conc)))

    return {
        "translated": list(await each(lambda n: LegacyClient(http, plain.url))),
        "translated_auth": list(await each(lambda n: BearerClient(http, authed.url, lambda: keys.token(f"u{n}"),
                                                                  False))),
        "translated_auth_cold": list(await each(lambda n: BearerClient(
            http, authed.url, lambda: keys.token(f"c{n}"), True))),
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
              f"{'met' if ok else 'MISSED'}); a new token every request {cold:.3f} (reported)")
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
