"""The hint folder is private to this Unix user, and nothing but our own sockets is removed.

These run as whatever user runs the suite; the same attacks made by a second Unix
user live in tests/concurrency/test_hostile_local.py (root only, as in CI).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import override_settings

from django_arcature.conf import validate
from django_arcature.core.hint_paths import SOCKET_PATH_MAX_BYTES, WAKE_HINT_DIR_MAX_BYTES
from django_arcature.hints import HintReceiver, hint_directory, send_hints


@pytest.fixture
def shared_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short stand-in for /tmp (sticky, world-writable) that the system temp folder
    points to for the test, so the default hint folder is made in it."""
    folder = Path(tempfile.mkdtemp(prefix="arc-t-", dir="/tmp"))
    folder.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _dead_socket(path: Path) -> None:
    """A socket file nobody reads: a datagram sent to it is refused."""
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(str(path))
    dead.close()


def test_the_default_folder_is_this_users_own_and_private(shared_tmp: Path) -> None:
    directory = hint_directory("default")
    assert directory.parent == shared_tmp / f"arcature-wake-{os.geteuid()}"
    receiver = HintReceiver("default", lambda: None)
    assert receiver.start()
    try:
        for folder in (directory.parent, directory):
            info = os.lstat(folder)
            assert info.st_uid == os.geteuid()
            assert info.st_mode & 0o777 == 0o700
    finally:
        receiver.close()


def test_xdg_runtime_dir_is_used_when_it_is_ours_and_private(
    shared_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = shared_tmp / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert hint_directory("default").parent == runtime / "arcature-wake"
    own_tmp = shared_tmp / f"arcature-wake-{os.geteuid()}"
    for invalid in ("open", "link", "relative"):
        (shared_tmp / "open").mkdir(mode=0o755, exist_ok=True)
        (shared_tmp / "open").chmod(0o755)
        if invalid == "link" and not (shared_tmp / "link").exists():
            (shared_tmp / "link").symlink_to(runtime)
        value = "run" if invalid == "relative" else str(shared_tmp / invalid)
        monkeypatch.setenv("XDG_RUNTIME_DIR", value)
        assert hint_directory("default").parent == own_tmp, invalid


@pytest.mark.parametrize("mode", [0o777, 0o755, 0o770])
def test_a_folder_open_to_others_is_refused_with_what_to_fix(
    shared_tmp: Path, mode: int, caplog: pytest.LogCaptureFixture
) -> None:
    base = shared_tmp / f"arcature-wake-{os.geteuid()}"
    base.mkdir()
    base.chmod(mode)
    caplog.set_level(logging.WARNING, "django_arcature")
    assert not HintReceiver("default", lambda: None).start()
    assert str(base) in caplog.text
    assert "hints are off" in caplog.text
    assert "0700" in caplog.text
    assert not hint_directory("default").exists(), "nothing was made inside it"
    assert send_hints("default") == 0


def test_a_symlink_at_the_folders_path_is_never_followed(shared_tmp: Path) -> None:
    # Someone points the hint folder at a folder of ours holding a dead socket and a
    # file: an enqueue used to send to each, and delete the ones that refused.
    victim = shared_tmp / "victim"
    victim.mkdir(mode=0o700)
    leaf = victim / hint_directory("default").name
    leaf.mkdir(mode=0o700)
    _dead_socket(leaf / "other-app.sock")
    (leaf / "notes.sock").write_text("keep me")
    (shared_tmp / f"arcature-wake-{os.geteuid()}").symlink_to(victim)
    assert send_hints("default") == 0
    assert not HintReceiver("default", lambda: None).start()
    assert send_hints("default") == 0
    assert (leaf / "other-app.sock").exists()
    assert (leaf / "notes.sock").read_text() == "keep me"
    assert sorted(p.name for p in leaf.iterdir()) == ["notes.sock", "other-app.sock"]


def test_only_our_own_sockets_are_removed(shared_tmp: Path) -> None:
    receiver = HintReceiver("default", lambda: None)
    assert receiver.start()
    directory = receiver.directory
    try:
        (directory / "12345-file.sock").write_text("not a socket")
        os.symlink(shared_tmp / "elsewhere.sock", directory / "12345-link.sock")
        _dead_socket(directory / "12345-dead.sock")
        assert send_hints("default") == 1  # only the live receiver is nudged
        assert (directory / "12345-file.sock").read_text() == "not a socket"
        assert os.path.islink(directory / "12345-link.sock")
        assert not (directory / "12345-dead.sock").exists(), "our own stale socket goes"
    finally:
        receiver.close()
    assert not receiver.path.exists()


def test_close_unblocks_and_ends_the_receiving_thread(shared_tmp: Path) -> None:
    receiver = HintReceiver("default", lambda: None)
    assert receiver.start()
    thread = receiver._thread
    assert thread.is_alive()
    receiver.close()
    assert not thread.is_alive(), "close() left its thread blocked in recv()"
    assert "arcature-hints" not in {t.name for t in threading.enumerate()}


def test_a_socket_path_that_cannot_fit_is_refused_with_the_arithmetic() -> None:
    folder = "/" + "d" * (WAKE_HINT_DIR_MAX_BYTES - 1)
    assert validate({"WAKE_HINT_DIR": folder}) == []
    for too_long in (folder + "x", "/" + "é" * 40):  # 81 bytes in 41 characters
        (problem,) = validate({"WAKE_HINT_DIR": too_long})
        assert f"{WAKE_HINT_DIR_MAX_BYTES} bytes" in problem
        assert str(SOCKET_PATH_MAX_BYTES) in problem


def test_the_longest_accepted_folder_still_binds(monkeypatch: pytest.MonkeyPatch) -> None:
    # The limit is what fits: a worker with the longest pid still binds in it.
    base = Path(tempfile.mkdtemp(prefix="arc-l-", dir="/tmp"))
    try:
        folder = base / ("d" * (WAKE_HINT_DIR_MAX_BYTES - len(str(base)) - 1))
        assert len(os.fsencode(folder)) == WAKE_HINT_DIR_MAX_BYTES
        monkeypatch.setattr(os, "getpid", lambda: 4_194_304)  # Linux's largest pid_max
        with override_settings(ARCATURE={"WAKE_HINT_DIR": str(folder)}):
            receiver = HintReceiver("default", lambda: None)
            assert len(os.fsencode(receiver.path)) == SOCKET_PATH_MAX_BYTES
            assert receiver.start()
            receiver.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
