"""Same-host wake-up hints: sending finds receivers, drops stale ones, never raises."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import override_settings

from django_arcature.hints import HintReceiver, hint_directory, send_hints


@pytest.fixture
def hint_dir() -> Iterator[str]:
    # Short (a Unix socket path has at most 107 bytes: WAKE_HINT_DIR at most 64), and
    # this user's own.
    folder = tempfile.mkdtemp(prefix="arc-h-", dir="/tmp")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_no_worker_means_nothing_sent(hint_dir: str) -> None:
    with override_settings(ARCATURE={"WAKE_HINT_DIR": hint_dir}):
        assert send_hints("default") == 0


def test_a_receiver_is_woken_and_cleans_up(hint_dir: str) -> None:
    woken = threading.Event()
    with override_settings(ARCATURE={"WAKE_HINT_DIR": hint_dir}):
        receiver = HintReceiver("default", woken.set)
        assert receiver.start()
        try:
            assert send_hints("default") == 1
            assert woken.wait(5)
        finally:
            receiver.close()
        assert not receiver.path.exists()
        assert send_hints("default") == 0


def test_a_stale_socket_is_removed_not_retried(hint_dir: str) -> None:
    with override_settings(ARCATURE={"WAKE_HINT_DIR": hint_dir}):
        directory = hint_directory("default")
        directory.mkdir(mode=0o700)  # as a worker makes it
        stale = directory / "12345-dead.sock"
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        dead.bind(str(stale))
        dead.close()  # bound, then gone: the file stays, nobody reads it
        assert send_hints("default") == 0
        assert not stale.exists()


def test_an_unusable_folder_turns_hints_off(hint_dir: str) -> None:
    blocker = Path(hint_dir) / "file"
    blocker.write_text("not a folder")
    with override_settings(ARCATURE={"WAKE_HINT_DIR": str(blocker)}):
        assert not HintReceiver("default", lambda: None).start()
        assert send_hints("default") == 0


def _settled(directory: Path) -> None:
    """Wait until the folder's last change is old enough for its listing to be kept."""
    time.sleep(0.12)


def test_a_worker_bound_after_a_listing_was_kept_gets_the_next_hint(hint_dir: str) -> None:
    first, second = threading.Event(), threading.Event()
    with override_settings(ARCATURE={"WAKE_HINT_DIR": hint_dir}):
        early = HintReceiver("default", first.set)
        assert early.start()
        late = HintReceiver("default", second.set)
        try:
            _settled(early.directory)
            assert send_hints("default") == 1  # the listing is kept from here on
            assert send_hints("default") == 1
            assert late.start()
            assert send_hints("default") == 2
            assert second.wait(5)
        finally:
            early.close()
            late.close()
        assert send_hints("default") == 0


def test_a_kept_listing_is_read_again_within_a_second_whatever_the_folder_time(
    hint_dir: str,
) -> None:
    # A socket bound in the same tick of the file system's clock as the last change
    # leaves the folder's time as it was: the listing still expires.
    woken = threading.Event()
    with override_settings(ARCATURE={"WAKE_HINT_DIR": hint_dir}):
        early = HintReceiver("default", lambda: None)
        assert early.start()
        late = HintReceiver("default", woken.set)
        try:
            _settled(early.directory)
            before = os.stat(early.directory).st_mtime_ns
            assert send_hints("default") == 1
            assert late.start()
            os.utime(early.directory, ns=(before, before))  # as if nothing had changed
            deadline = time.monotonic() + 3
            while send_hints("default") < 2:
                assert time.monotonic() < deadline, "the new worker was never found"
                time.sleep(0.05)
            assert woken.wait(5)
        finally:
            early.close()
            late.close()


def test_a_kept_listing_drops_a_worker_that_went_away(hint_dir: str) -> None:
    with override_settings(ARCATURE={"WAKE_HINT_DIR": hint_dir}):
        directory = hint_directory("default")
        directory.mkdir(mode=0o700)  # as a worker makes it
        gone = directory / "12345-gone.sock"
        receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        receiver.bind(str(gone))
        _settled(directory)
        before = os.stat(directory).st_mtime_ns
        assert send_hints("default") == 1
        receiver.close()  # the file stays: refused from now on
        os.utime(directory, ns=(before, before))
        assert send_hints("default") == 0
        assert not gone.exists()
