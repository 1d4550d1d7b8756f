#!/usr/bin/env python3
"""Run the install instructions of README.md and docs/tutorial.md as written.

Why: the issue's "done when" is that the README's install instructions work on a
fresh machine, and instructions drift as quietly as code (a tool the text never
says to install, a placeholder, a Python the machine does not have). Each fenced
block right after an ``<!-- install-check -->`` line is run by bash, whole, with
``set -euo pipefail``, in an empty folder, with ``/path/to/django-arcature``
replaced by a clean copy of the repository (its tracked files only: no .venv,
no var/, no build output), and with pyenv's shims and bin taken off ``PATH``,
as on a machine where pyenv is not initialised. A ``console`` block's commands
are its ``$ `` lines. After each block the virtualenv it made must import the
package from its own site-packages (an install, not the checkout).

Usage: scripts/check-install-docs.py [--keep]   (from the repository; exit 1 on failure)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ("README.md", "docs/tutorial.md")
MARKER = "<!-- install-check -->"
CHECKOUT = "/path/to/django-arcature"
FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    document: str
    line: int
    commands: str


def install_blocks(document: str, text: str) -> list[Block]:
    """The shell commands of every block marked ``<!-- install-check -->``."""
    lines = text.splitlines()
    blocks = []
    for number, line in enumerate(lines):
        if line.strip() != MARKER:
            continue
        fence = FENCE.match(lines[number + 1]) if number + 1 < len(lines) else None
        if fence is None:
            raise ValueError(f"{document}:{number + 1}: {MARKER} is not followed by a fenced block")
        body = []
        for inner in lines[number + 2 :]:
            if inner.startswith("```"):
                break
            body.append(inner)
        else:
            raise ValueError(f"{document}:{number + 2}: the fenced block is not closed")
        if fence.group(1) == "console":
            body = [inner[2:] for inner in body if inner.startswith("$ ")]
        blocks.append(Block(document, number + 2, "\n".join(body) + "\n"))
    return blocks


def clean_copy(destination: Path) -> None:
    """The tracked files of the working tree, as a fresh clone would have them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = ROOT / name
        if not source.is_file():
            continue  # deleted in the working tree
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def without_pyenv(path: str) -> str:
    return os.pathsep.join(
        part for part in path.split(os.pathsep) if ".pyenv" not in Path(part).parts
    )


def run(block: Block, checkout: Path, folder: Path) -> bool:
    script = "set -euo pipefail\n" + block.commands.replace(CHECKOUT, str(checkout))
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYENV_VERSION"}
    }
    environment["PATH"] = without_pyenv(environment.get("PATH", "/usr/bin:/bin"))
    print(f"[install-docs] {block.document}:{block.line}: running in {folder}", flush=True)
    done = subprocess.run(
        ["bash", "-c", script], cwd=folder, env=environment, capture_output=True, text=True
    )
    if done.returncode != 0:
        print(done.stdout + done.stderr)
        print(f"[install-docs] FAILED: {block.document}:{block.line} (exit {done.returncode})")
        return False
    venvs = sorted(folder.rglob(".venv/bin/python"))
    if not venvs:
        print(f"[install-docs] FAILED: {block.document}:{block.line} made no .venv")
        return False
    where = subprocess.run(
        [str(venvs[0]), "-c", "import django_arcature; print(django_arcature.__file__)"],
        cwd=folder.parent,  # not the checkout, whose package python -c would find first
        env=environment,
        capture_output=True,
        text=True,
    )
    installed = where.returncode == 0 and "site-packages" in where.stdout
    if not installed:
        print(where.stdout + where.stderr)
        print(f"[install-docs] FAILED: {block.document}:{block.line}: the package is not installed")
        return False
    print(f"[install-docs] ok: {block.document}:{block.line} -> {where.stdout.strip()}")
    return True


def main(argv: list[str]) -> int:
    keep = "--keep" in argv
    work = Path(tempfile.mkdtemp(prefix="arcature-install-docs-"))
    checkout = work / "django-arcature"
    clean_copy(checkout)
    blocks = [
        block
        for document in DOCUMENTS
        for block in install_blocks(document, (checkout / document).read_text(encoding="utf-8"))
    ]
    if not blocks:
        print(f"[install-docs] FAILED: no {MARKER} block in {', '.join(DOCUMENTS)}")
        return 1
    ok = True
    for index, block in enumerate(blocks):
        folder = work / f"user-{index}"
        folder.mkdir()
        ok = run(block, checkout, folder) and ok
    if keep:
        print(f"[install-docs] kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
