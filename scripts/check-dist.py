"""Check that a built sdist and wheel carry what an installed package needs.

``twine check`` reads the metadata only; a wheel that forgot its templates, its
migrations or a compiled catalogue still passes it and then fails in a user's
admin. This compares the archives with the source tree: every file of the package
that is not Python source (templates, static files, catalogues, ``py.typed``) and
every migration must be in the wheel, every ``.po`` needs its compiled ``.mo``,
and the sdist must hold the tests, the docs and the smoke suite.

Usage: python scripts/check-dist.py DIST_FOLDER
"""

from __future__ import annotations

import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "django_arcature"
SKIPPED_PARTS = {"__pycache__"}
SDIST_MUST_HOLD = ("tests/conftest.py", "docs/index.md", "smoke/conftest.py", "CHANGELOG.md")


def package_files() -> list[str]:
    """Every file of the package as a wheel path (``django_arcature/...``)."""
    found = []
    for path in sorted(PACKAGE.rglob("*")):
        if path.is_file() and not SKIPPED_PARTS & set(path.parts) and path.suffix != ".pyc":
            found.append(path.relative_to(ROOT).as_posix())
    return found


def problems_in_wheel(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    problems = [f"wheel lacks {name}" for name in package_files() if name not in names]
    for name in sorted(names):
        if name.endswith(".po") and name[:-3] + ".mo" not in names:
            problems.append(f"wheel has {name} but not its compiled .mo")
    if "django_arcature/py.typed" not in names:
        problems.append("wheel lacks django_arcature/py.typed")
    return problems


def problems_in_sdist(sdist: Path) -> list[str]:
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    problems = [f"sdist lacks {name}" for name in SDIST_MUST_HOLD if name not in names]
    problems += [f"sdist lacks {name}" for name in package_files() if name not in names]
    return problems


def main(folder: str) -> int:
    dist = Path(folder)
    wheels = sorted(dist.glob("django_arcature-*.whl"))
    sdists = sorted(dist.glob("django_arcature-*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        print(f"expected one wheel and one sdist in {dist}, found {wheels + sdists}")
        return 1
    problems = problems_in_wheel(wheels[0]) + problems_in_sdist(sdists[0])
    for problem in problems:
        print(problem)
    if problems:
        return 1
    print(f"{wheels[0].name} and {sdists[0].name}: every package file, catalogue and test is there")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "var/release/dist"))
