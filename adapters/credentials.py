"""The gateway's own credentials for its upstreams: the rules, without the I/O (no token passthrough).

What this module owns (2026-07-28 basic/authorization, Security Considerations, "Access Token Privilege
Restriction": a server MUST NOT pass through the token it received from the client):

- which credential an upstream gets (:class:`Grant`): none, the client's own where the upstream shares the gateway's
  audience (``forward``), a static one, the gateway's own client-credentials token (RFC 6749 §4.4), or the client's
  token exchanged for one issued for that upstream (RFC 8693);
- the token-endpoint forms for both grants, with the upstream's resource indicator (RFC 8707) and scopes, and the
  reading of a token answer (RFC 6749 §5.1, RFC 8693 §2.2.1);
- how long a token is used (until shortly before it expires, :func:`usable_until`) and what it is cached under
  (:func:`exchange_key`: a digest, never the token);
- what an upstream's 401 or 403 becomes (:func:`after_refusal`): one retry with a fresh credential, the gateway's
  own step-up challenge to the client, or an operator problem.

The shell (``gateway.auth.credentials``) posts the forms, reads the clock and keeps the cache in memory only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Final

from adapters.authz import Cause, Failure, ResourceServer, refusal
from adapters.errors import ErrorValue
from adapters.jsonwire import JsonObject, JsonView

TOKEN_EXCHANGE: Final = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE: Final = "urn:ietf:params:oauth:token-type:access_token"
# A token answer without expires_in (RFC 6749 §5.1 only RECOMMENDS it) is used this long at most.
DEFAULT_LIFETIME_SECONDS: Final = 60.0


class Grant(Enum):
    """How an upstream is authorized (``auth`` of ``[upstreams.NAME]`` / ``[gateway.upstream_auth]``)."""

    NONE = "none"
    FORWARD = "forward"  # the client's token, only where the upstream shares the gateway's audience
    STATIC = "static"  # a fixed credential from an environment variable ("gateway" is its older name)
    CLIENT_CREDENTIALS = "client_credentials"
    TOKEN_EXCHANGE = "token_exchange"
    LOGIN = "login"  # the stdio door's user's own token, from their login (adapters.oauth_client), never a client's

    @classmethod
    def of(cls, name: str) -> Grant:
        return cls.STATIC if name == "gateway" else cls(name)

    @property
    def minted(self) -> bool:
        """A credential the gateway obtains at the authorization server, so a fresh one can be had after a 401."""
        return self in (Grant.CLIENT_CREDENTIALS, Grant.TOKEN_EXCHANGE, Grant.LOGIN)


@dataclass(frozen=True, slots=True)
class Issued:
    """A token the authorization server issued to the gateway, and the times it was issued and expires."""

    token: str = ""
    issued_at: float = 0.0
    expires_at: float = 0.0
    scope: str | None = None

    def __repr__(self) -> str:  # a token never reaches a log line, even through a repr
        return f"Issued(expires_at={self.expires_at}, scope={self.scope!r})"


class Refusal(Enum):
    """What an upstream's 401 or 403 to a request carrying the gateway's credential becomes."""

    RETRY = "retry"  # a 401 to a minted credential, the first time: forget it and send once more with a fresh one
    STEP_UP = "step_up"  # the exchanged token lacked a scope: the client must step up (the gateway's own 403)
    OPERATOR = "operator"  # the gateway's own credential does not do: an upstream failure, never the client's


def client_credentials_form(resource: str, scopes: Sequence[str]) -> dict[str, str]:
    """RFC 6749 §4.4.2 with the upstream as the resource indicator (RFC 8707 §2)."""
    form = {"grant_type": "client_credentials", "resource": resource}
    if scopes:
        form["scope"] = " ".join(scopes)
    return form


def exchange_form(subject_token: str, resource: str, scopes: Sequence[str]) -> dict[str, str]:
    """RFC 8693 §2.1: the client's verified access token as the subject, for the upstream's resource."""
    form = {"grant_type": TOKEN_EXCHANGE, "subject_token": subject_token, "subject_token_type": ACCESS_TOKEN_TYPE,
            "requested_token_type": ACCESS_TOKEN_TYPE, "resource": resource}
    if scopes:
        form["scope"] = " ".join(scopes)
    return form


def read_token_answer(answer: JsonView, now: float) -> Issued | str:
    """A token endpoint's 200 answer as :class:`Issued`, or why it cannot be used (never quoting the token)."""
    token, kind = answer.get("access_token"), answer.get("token_type")
    if not isinstance(token, str) or not token or not token.isascii() or any(c.isspace() for c in token):
        return "the token answer holds no usable access_token"
    if not isinstance(kind, str) or kind.lower() not in ("bearer", "n_a"):  # N_A: RFC 8693 §2.2.1
        return f"the token answer's token_type is {kind!r}, not Bearer"
    expires_in = answer.get("expires_in")
    lifetime = (float(expires_in) if isinstance(expires_in, int | float) and not isinstance(expires_in, bool)
                and expires_in > 0 else DEFAULT_LIFETIME_SECONDS)
    scope = answer.get("scope")
    return Issued(token, now, now + lifetime, scope if isinstance(scope, str) else None)


def usable_until(issued: Issued, refresh_before_seconds: float) -> float:
    """When a token stops being sent: ``refresh_before_seconds`` before it expires, but never earlier than half
    its lifetime (a token that lives less than the margin is still used, not fetched again for every call)."""
    margin = min(refresh_before_seconds, (issued.expires_at - issued.issued_at) / 2)
    return issued.expires_at - margin


def exchange_key(subject_token: str) -> str:
    """What an exchanged token is cached under: the subject token's digest. A client's refreshed (or stepped-up)
    token is exchanged again, so the upstream token never holds scopes the client's current token lacks."""
    return hashlib.sha256(subject_token.encode("ascii", "replace")).hexdigest()


def challenge_params(challenges: Sequence[str]) -> dict[str, str]:
    """The auth-params of the first Bearer challenge (RFC 6750 §3), lower-cased names; empty when none."""
    for value in challenges:
        scheme, _, rest = value.strip().partition(" ")
        if scheme.lower() == "bearer":
            return _auth_params(rest)
    return {}


def after_refusal(status: int, challenges: Sequence[str], grant: Grant, retried: bool) -> Refusal:
    """An upstream 401 to a minted credential is retried once; a 403 ``insufficient_scope`` to an exchanged token is
    the client's to step up (its token's scopes bound the exchanged one's); anything else is the operator's."""
    if status == 401 and grant.minted and not retried:
        return Refusal.RETRY
    if status == 403 and grant is Grant.TOKEN_EXCHANGE:
        if challenge_params(challenges).get("error") == "insufficient_scope":
            return Refusal.STEP_UP
    return Refusal.OPERATOR


def step_up(server: ResourceServer, challenges: Sequence[str], held: Sequence[str] = ()) -> ErrorValue:
    """The gateway's own 403 ``insufficient_scope`` naming the scopes the upstream asked for (2025-11-25
    basic/authorization "Scope Challenge Handling"), with the gateway's metadata, never the upstream's."""
    wanted = challenge_params(challenges).get("scope", "").split()
    scopes = tuple(sorted({*held, *wanted, *server.required_scopes}))
    failure = Failure(Cause.INSUFFICIENT_SCOPE, "the upstream needs a scope the access token lacks", scopes)
    return refusal(server, failure).error


def _auth_params(text: str) -> dict[str, str]:
    """``name="value"`` or ``name=token`` pairs separated by commas; quoted values may hold commas."""
    params: dict[str, str] = {}
    rest = text
    while rest:
        name, eq, rest = rest.partition("=")
        if not eq:
            break
        rest = rest.lstrip()
        if rest.startswith('"'):
            value, _, rest = rest[1:].partition('"')
        else:
            value, _, rest = rest.partition(",")
            rest = "," + rest if rest else ""
        params[name.strip().strip(",").strip().lower()] = value.strip()
        rest = rest.lstrip().removeprefix(",").lstrip()
    return params


CLIENT_ASSERTION_TYPE: Final = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
ASSERTION_SECONDS: Final = 60  # a client assertion is good for one token request: short-lived (RFC 7523 §3)


def client_assertion_claims(client_id: str, token_endpoint: str, now: float, jti: str) -> JsonObject:
    """private_key_jwt (RFC 7523 §3, RFC 7521 §5.2): the client is issuer and subject, the token endpoint the
    audience, a unique ``jti`` so the authorization server can refuse a replay."""
    return {"iss": client_id, "sub": client_id, "aud": token_endpoint, "iat": int(now),
            "exp": int(now) + ASSERTION_SECONDS, "jti": jti}


def assertion_fields(client_id: str, assertion: str) -> dict[str, str]:
    """The form fields that authenticate the client with its signed assertion instead of a secret."""
    return {"client_id": client_id, "client_assertion_type": CLIENT_ASSERTION_TYPE, "client_assertion": assertion}


def forward_refusal(where: str, upstream_resource: str, own_resources: Sequence[str]) -> str | None:
    """``forward`` passes the client's token on, which is allowed only where that token was issued for the
    upstream too: its protected-resource metadata must name one of the gateway's own resources (one audience:
    2026-07-28 basic/authorization, Security Considerations, "Access Token Privilege Restriction"). The reason to
    refuse the start, or None."""
    if upstream_resource in own_resources:
        return None
    own = ", ".join(own_resources) or "unknown (set [gateway] public_url)"
    return (f"{where}: auth = \"forward\" would pass clients' tokens to {upstream_resource}, whose metadata names "
            f"another resource than the gateway's ({own}); use token_exchange or client_credentials")
