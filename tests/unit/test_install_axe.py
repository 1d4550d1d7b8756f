"""scripts/install-axe.sh: a no-op when the pinned axe-core is there, and without npm a
failure in CI but a loud note elsewhere (the accessibility test then skips, saying so)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def checkout(tmp_path: Path) -> Path:
    """The script and the pinned package files, laid out as in the repository."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts/install-axe.sh", tmp_path / "scripts")
    shutil.copytree(ROOT / "tests/browser/axe", tmp_path / "tests/browser/axe")
    return tmp_path


def run(root: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "CI"}
    environment.update(ARCATURE_NPM=str(root / "no-such-npm"), **env)
    return subprocess.run(
        ["bash", str(root / "scripts/install-axe.sh")],
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )


def pinned() -> str:
    manifest = json.loads((ROOT / "tests/browser/axe/package.json").read_text())
    return str(manifest["dependencies"]["axe-core"])


def test_without_npm_ci_fails_and_a_laptop_is_told(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    in_ci = run(root, CI="true")
    assert in_ci.returncode == 1
    assert "npm is missing" in in_ci.stdout
    local = run(root)
    assert local.returncode == 0
    assert "will SKIP" in local.stdout
    assert not (root / "var/npm").exists()


def test_the_pinned_version_already_there_needs_no_npm(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    package = root / "var/npm/node_modules/axe-core"
    package.mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": "axe-core", "version": pinned()}))
    (package / "axe.min.js").write_text("/* axe */")
    shutil.copy(root / "tests/browser/axe/package-lock.json", root / "var/npm")
    done = run(root, CI="true")  # npm is missing: it must not be needed
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"axe-core {pinned()} already in var/npm" in done.stdout
    # Another version installed (or a changed lock file) means installing again.
    (package / "package.json").write_text(json.dumps({"name": "axe-core", "version": "4.0.0"}))
    assert run(root, CI="true").returncode == 1
