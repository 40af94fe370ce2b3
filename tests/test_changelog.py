"""CHANGELOG.md (Keep a Changelog): the version in pyproject.toml has its heading, or the
changes wait under Unreleased; each release heading has its date."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADING = re.compile(r"^## \[(?P<name>[^\]]+)\](?P<rest>.*)$", re.MULTILINE)


def changelog() -> str:
    return (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


def sections(text: str) -> dict[str, tuple[str, str]]:
    """Each ``## [name] rest`` heading: (rest, the section's body)."""
    found = list(HEADING.finditer(text))
    return {
        m.group("name"): (m.group("rest"), text[m.end() : nxt.start() if nxt else len(text)])
        for m, nxt in zip(found, [*found[1:], None], strict=True)
    }


def test_the_version_has_a_heading_or_waits_under_unreleased() -> None:
    with (ROOT / "pyproject.toml").open("rb") as file:
        version = tomllib.load(file)["project"]["version"]
    text = changelog()
    assert text.startswith("# Changelog\n")
    found = sections(text)
    assert version in found or "Unreleased" in found, (
        f"CHANGELOG.md has no '## [{version}]' heading and no '## [Unreleased]' section"
    )
    if "Unreleased" in found:
        assert next(iter(found)) == "Unreleased"  # it comes first
        body = found["Unreleased"][1]
        assert re.search(r"^- \S", body, re.MULTILINE), "Unreleased lists no change"


def test_each_release_heading_has_its_date() -> None:
    for name, (rest, _) in sections(changelog()).items():
        if name == "Unreleased":
            continue
        assert re.fullmatch(r"\d+\.\d+\.\d+\S*", name), f"not a version: {name!r}"
        assert re.fullmatch(r" - \d{4}-\d\d-\d\d", rest), f"## [{name}] needs ' - YYYY-MM-DD'"


def test_the_sections_parser_reads_a_release() -> None:
    sample = "# Changelog\n\n## [Unreleased]\n\n- a\n\n## [0.2.0] - 2027-01-05\n\n- b\n"
    found = sections(sample)
    assert list(found) == ["Unreleased", "0.2.0"]
    assert found["0.2.0"] == (" - 2027-01-05", "\n\n- b\n")
