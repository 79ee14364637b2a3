"""One error vocabulary (issue #41): JSON-RPC error codes are written as numbers only in ``adapters/errors.py``;
everywhere else in the core and the shell they are named (``INVALID_PARAMS``, ``HEADER_MISMATCH``...), so a code
has one definition and one table maps it to an HTTP status."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE = re.compile(r"-32\d{3}")


def test_error_codes_are_numbers_only_in_adapters_errors() -> None:
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for package in ("adapters", "gateway") for path in sorted((ROOT / package).rglob("*.py"))
             if path != ROOT / "adapters" / "errors.py"
             for n, line in enumerate(path.read_text().splitlines(), 1) if CODE.search(line)]
    assert not found, "name these codes (adapters.errors exports them):\n" + "\n".join(found)


def test_the_scan_sees_a_literal_code() -> None:
    assert CODE.search("return ErrorValue(-32602, 'bad')") and not CODE.search("return ErrorValue(INVALID_PARAMS)")
