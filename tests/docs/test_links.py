"""Every relative link in the README, the changelog and docs/ leads to a file of the checkout, and every
``#anchor`` into a Markdown page to one of its headings (GitHub's rule for heading ids), so moving or renaming a
page or a section cannot leave a dead link behind."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]


def anchors(page: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation other than ``-`` and ``_`` dropped, spaces as ``-``."""
    text = FENCE.sub("", page.read_text())
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
            for title in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE)}


def dead_links(page: Path) -> list[str]:
    dead = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            dead.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            dead.append(target)
    return dead


def test_every_relative_link_resolves() -> None:
    found = {str(page.relative_to(ROOT)): dead for page in pages() if (dead := dead_links(page))}
    assert found == {}


def test_the_readme_stays_short_and_leads_to_the_index() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    assert "(docs/index.md)" in readme
