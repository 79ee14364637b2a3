"""Typed JSON at the core's boundaries (issue #41): ``adapters/`` reads what others sent as read-only views
(``JsonView``) and builds JSON values (``JsonValue``, ``JsonObject``) from ``adapters.jsonwire``, so ``Any`` stays
rare there: at most :data:`MAX_PER_100_LINES` per hundred lines (h11 has 0.5, websockets 0.7; adapters/ had 6.6
when the issue was filed). An alias that only renames ``Any`` (``JsonObject = dict[str, Any]``) would pass the count
while typing nothing, so no alias in adapters/ may mention ``Any``."""

from __future__ import annotations

import re
from pathlib import Path

ADAPTERS = Path(__file__).resolve().parent.parent / "adapters"
MAX_PER_100_LINES = 3.3
ANY = re.compile(r"\bAny\b")
# ``Name: TypeAlias = ...``, ``Name = dict[...]`` / ``Mapping[...]`` / ``list[...]`` / ``... | ...`` at module level
ALIAS = re.compile(r"^[A-Za-z_]\w*\s*(?::\s*TypeAlias\s*)?=\s*(?:[\w.]+\[|Union\[|Any\b|\"|')", re.MULTILINE)


def _density(texts: list[str]) -> float:
    lines = sum(len(text.splitlines()) for text in texts)
    return 100 * sum(len(ANY.findall(text)) for text in texts) / max(lines, 1)


def _aliases_of_any(text: str) -> list[str]:
    return [line for match in ALIAS.finditer(text)
            if ANY.search(line := text[match.start():text.find("\n", match.start())])]


def test_any_is_rare_in_adapters() -> None:
    paths = sorted(ADAPTERS.glob("*.py"))
    density = _density([path.read_text() for path in paths])
    worst = sorted(((len(ANY.findall(p.read_text())), p.name) for p in paths), reverse=True)[:5]
    assert density <= MAX_PER_100_LINES, (
        f"adapters/ has {density:.2f} Any per 100 lines (at most {MAX_PER_100_LINES}): type the JSON with "
        f"adapters.jsonwire's JsonValue / JsonObject / JsonView, or object and narrowing; most: {worst}")


def test_no_alias_in_adapters_hides_any() -> None:
    found = [f"{path.name}: {line}" for path in sorted(ADAPTERS.glob("*.py"))
             for line in _aliases_of_any(path.read_text())]
    assert not found, "an alias of Any types nothing; use adapters.jsonwire's JSON types:\n" + "\n".join(found)


def test_the_count_and_the_alias_check_see_what_they_look_for() -> None:
    assert _density(["x: Any = 1\ny = 2"]) == 50.0 and _density(["AnyThing = 1\nanyhow = 2"]) == 0.0
    assert _aliases_of_any('JsonObject = dict[str, Any]\nView: TypeAlias = "Mapping[str, Any]"\n') == [
        "JsonObject = dict[str, Any]", 'View: TypeAlias = "Mapping[str, Any]"']
    assert _aliases_of_any("Value = Any\n") == ["Value = Any"]
    assert _aliases_of_any("JsonObject: TypeAlias = dict[str, JsonValue]\nLIMIT: Final = 3\n") == []
