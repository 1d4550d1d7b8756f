"""Same-host wake-up hints: sending finds receivers, drops stale ones, never raises."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from django.test import override_settings

from django_arcature.hints import HintReceiver, hint_directory, send_hints


@pytest.fixture
def hint_dir(tmp_path: Path) -> str:
    # Short: a Unix socket path has a length limit of about 100 bytes.
    return str(tmp_path)


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
        directory.mkdir(parents=True)
        stale = directory / "12345-dead.sock"
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        dead.bind(str(stale))
        dead.close()  # bound, then gone: the file stays, nobody reads it
        assert send_hints("default") == 0
        assert not stale.exists()


def test_an_unusable_folder_turns_hints_off(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with override_settings(ARCATURE={"WAKE_HINT_DIR": str(blocker)}):
        assert not HintReceiver("default", lambda: None).start()
        assert send_hints("default") == 0
