"""The gateway's exceptions form one tree (gateway.errors): every exception class defined under ``gateway/``
derives from ``GatewayError``, through the base of its concern, so nothing the shell raises is outside it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import gateway
from gateway.errors import GatewayError, OpsError, SessionError, StoreError, UpstreamHopError

# The concern each package's exceptions belong to (the tree in gateway.errors' docstring).
CONCERN = {"gateway.upstream": UpstreamHopError, "gateway.session": (SessionError, StoreError), "gateway.ops": OpsError}


def _defined_exceptions() -> list[type[BaseException]]:
    found = []
    for info in pkgutil.walk_packages(gateway.__path__, "gateway."):
        if info.name.endswith("__main__"):  # importing it runs the command line
            continue
        module = importlib.import_module(info.name)
        found += [obj for _, obj in inspect.getmembers(module, inspect.isclass)
                  if issubclass(obj, BaseException) and obj.__module__ == module.__name__]
    return found


def test_every_exception_the_gateway_defines_is_a_gateway_error() -> None:
    defined = _defined_exceptions()
    assert len(defined) >= 15  # the walk sees the package, not an empty list
    outside = [f"{cls.__module__}.{cls.__qualname__}" for cls in defined if not issubclass(cls, GatewayError)]
    assert not outside, f"derive these from a gateway.errors base: {outside}"


def test_each_package_raises_under_its_own_concern() -> None:
    for cls in _defined_exceptions():
        for prefix, base in CONCERN.items():
            if cls.__module__.startswith(prefix + ".") and cls.__module__ != "gateway.errors":
                assert issubclass(cls, base), f"{cls.__module__}.{cls.__qualname__} is not under {base}"
