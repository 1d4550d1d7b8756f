"""Print the CHANGELOG entry of one version: the release notes of its tag.

The release workflow (.github/workflows/release.yml) calls this with the tag's
version and fails the release when the version has no entry, when the entry is
empty, or when the package's ``__version__`` says otherwise: a tag must never
publish a wheel whose notes or version number disagree with it.

Usage: python scripts/release-notes.py VERSION   (``v0.2.0`` or ``0.2.0``)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADING = re.compile(r"^## \[(?P<version>[^\]]+)\]")


def notes_for(changelog: str, version: str) -> str:
    """The text under ``## [version]`` up to the next version heading."""
    lines: list[str] = []
    inside = False
    for line in changelog.splitlines():
        match = HEADING.match(line)
        if match:
            if inside:
                break
            inside = match["version"] == version
            continue
        if inside:
            if re.match(r"^\[[^\]]+\]: ", line):  # the link references at the end
                break
            lines.append(line)
    if not inside and not lines:
        raise LookupError(f"CHANGELOG.md has no '## [{version}]' section")
    text = "\n".join(lines).strip()
    if not text:
        raise LookupError(f"CHANGELOG.md's '## [{version}]' section is empty")
    return text + "\n"


def package_version() -> str:
    source = (ROOT / "django_arcature" / "__init__.py").read_text()
    match = re.search(r'^__version__ = "([^"]+)"', source, re.MULTILINE)
    if not match:
        raise LookupError("django_arcature/__init__.py has no __version__")
    return match[1]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    version = argv[1].removeprefix("v")
    if package_version() != version:
        print(
            f"the tag says {version} but django_arcature.__version__ is {package_version()}: "
            "bump __version__ (and the CHANGELOG heading) before tagging",
            file=sys.stderr,
        )
        return 1
    try:
        sys.stdout.write(notes_for((ROOT / "CHANGELOG.md").read_text(), version))
    except LookupError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
