"""The wake-up hint receiver over a worker's life: nothing left behind, bad folders refused.

A long-lived process (a test runner, a supervisor that embeds the worker) may run
``Worker.run()`` many times; each run used to leave its hint thread blocked in
``recv()`` forever. And a ``WAKE_HINT_DIR`` too long for a Unix socket path used
to pass every check and switch hints off without a word.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_arcature.core.hint_paths import WAKE_HINT_DIR_MAX_BYTES
from django_arcature.models import Job, JobStatus
from django_arcature.worker import Worker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def hint_dir() -> Iterator[str]:
    folder = tempfile.mkdtemp(prefix="arc-w-", dir="/tmp")
    with override_settings(ARCATURE={"WAKE_HINT_DIR": folder, "POLL_INTERVAL": 0.05}):
        yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _hint_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "arcature-hints"]


def test_running_a_worker_many_times_leaves_no_thread_behind(hint_dir: str) -> None:
    counts = []
    for run in range(6):
        job = Job.objects.enqueue("tests.add", args=[run, 1])
        worker = Worker(burst=True, install_signal_handlers=False, duties=False, listen=False)
        assert worker.run() == 0
        assert worker._hints is not None, "hints were on for this run"
        assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
        assert not _hint_threads(), f"run {run} left its hint thread running"
        counts.append(threading.active_count())
    assert counts[-1] <= counts[0], f"threads grew run after run: {counts}"


TOO_LONG = "/" + "w" * WAKE_HINT_DIR_MAX_BYTES


def test_a_hint_folder_too_long_for_a_socket_path_fails_the_checks() -> None:
    with (
        override_settings(ARCATURE={"WAKE_HINT_DIR": TOO_LONG}),
        pytest.raises(SystemCheckError) as failed,
    ):
        call_command("check")
    text = str(failed.value)
    assert "arcature.E001" in text
    assert "WAKE_HINT_DIR" in text
    assert f"at most {WAKE_HINT_DIR_MAX_BYTES} bytes" in text
    assert "107 bytes of a Unix socket path" in text


def test_a_worker_refuses_to_start_with_it() -> None:
    with (
        override_settings(ARCATURE={"WAKE_HINT_DIR": TOO_LONG}),
        pytest.raises(ImproperlyConfigured, match=f"at most {WAKE_HINT_DIR_MAX_BYTES} bytes"),
    ):
        Worker(burst=True, install_signal_handlers=False, duties=False, listen=False)
