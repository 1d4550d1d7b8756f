"""The health file is written without following links or reusing a guessable name.

In a shared folder another user could plant a symbolic link where the worker
writes: at its old temporary name (``.<name>.<pid>.tmp``) or at the file itself.
The worker must then write only its own new file, never through the link. The
same attacks made by a second Unix user are in tests/concurrency/test_hostile_local.py.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from django_arcature.worker.health import OK, HealthFile, HealthFileError, check


def _victim(folder: Path) -> Path:
    victim = folder / "victim.txt"
    victim.write_text("precious")
    return victim


def test_a_link_at_the_old_temporary_name_is_not_followed(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    target = tmp_path / "health.json"
    (tmp_path / f".{target.name}.{os.getpid()}.tmp").symlink_to(victim)
    health = HealthFile(target, "w1", 1.0)
    health.beat(OK)
    assert victim.read_text() == "precious"
    assert check(target).healthy


def test_a_link_at_the_target_is_replaced_not_written_through(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    target = tmp_path / "health.json"
    target.symlink_to(victim)
    HealthFile(target, "w1", 1.0)
    assert victim.read_text() == "precious"
    info = os.lstat(target)
    assert stat.S_ISREG(info.st_mode), "the link itself was replaced by our file"
    assert json.loads(target.read_text())["worker_id"] == "w1"


def test_each_write_uses_a_new_unguessable_name_and_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    target = tmp_path / "health.json"
    health = HealthFile(target, "w1", 1.0)
    health.beat("stopping")
    health.stopped(0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["health.json"]
    assert stat.S_IMODE(os.lstat(target).st_mode) == 0o644  # as documented: a probe may read it


def test_a_failed_write_removes_its_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "health.json"
    target.mkdir()  # nothing can be renamed over a folder
    (target / "keep").write_text("x")
    with pytest.raises(HealthFileError):
        HealthFile(target, "w1", 1.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["health.json"]
    assert (target / "keep").read_text() == "x"
