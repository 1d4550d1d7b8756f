"""The release scripts: notes come from the CHANGELOG, the support matrix from tox.ini."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), ROOT / "scripts" / name)
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHANGELOG = """# Changelog

## [Unreleased]

### Added
- next

## [0.2.0] - 2026-12-01

### Added
- workflows

### Fixed
- a bug

## [0.1.0] - 2026-11-01

- first

[0.2.0]: https://example.invalid/compare
"""


def test_release_notes_are_the_versions_section_only() -> None:
    notes = load("release-notes.py").notes_for(CHANGELOG, "0.2.0")
    assert notes == "### Added\n- workflows\n\n### Fixed\n- a bug\n"
    assert load("release-notes.py").notes_for(CHANGELOG, "0.1.0") == "- first\n"


@pytest.mark.parametrize("version", ["9.9.9", "0.2"])
def test_a_version_without_a_section_is_refused(version: str) -> None:
    with pytest.raises(LookupError, match="no '## \\["):
        load("release-notes.py").notes_for(CHANGELOG, version)


def test_an_empty_section_is_refused() -> None:
    with pytest.raises(LookupError, match="empty"):
        load("release-notes.py").notes_for("## [1.0.0]\n\n## [0.9.0]\n- x\n", "1.0.0")


def test_a_tag_that_disagrees_with_the_package_version_fails() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "release-notes.py"), "v99.0.0"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "__version__" in done.stderr


def test_the_committed_support_matrix_is_what_tox_ini_gives() -> None:
    matrix = load("support-matrix.py")
    committed = (ROOT / "docs" / "reference" / "support-matrix.md").read_text()
    assert committed == matrix.render(ROOT / "tox.ini"), (
        "docs/reference/support-matrix.md is stale: run python scripts/support-matrix.py --write"
    )


def test_the_matrix_expands_tox_braces_and_reads_factors() -> None:
    matrix = load("support-matrix.py")
    assert matrix.expand("py313-dj61-{sqlite,postgres}") == [
        "py313-dj61-sqlite",
        "py313-dj61-postgres",
    ]
    assert matrix.row("py312-dj52-mysql") == (
        "3.12",
        "5.2 + django-tasks backport",
        "MariaDB 10.11",
        "the whole suite",
    )
    assert matrix.row("lint") is None


def test_the_package_version_has_its_release_notes() -> None:
    """What the release workflow runs for a tag of the current version must pass."""
    version = load("release-notes.py").package_version()
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "release-notes.py"), f"v{version}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "make release-check" in done.stdout
