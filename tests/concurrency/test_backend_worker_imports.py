"""A real ``arcature_worker`` runs a task from a package that is no installed app, and
refuses hostile rows without importing or calling anything (issue 19, A1).

The in-process cases are in tests/integration/test_backend_imports.py; this
one is the worker process as deployed: it has imported none of the task modules
when it starts, so every module is judged before its first import.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from django_arcature.models import Job
from django_arcature.tasks.compat import TaskResultStatus
from tests.concurrency.conftest import WorkerProcess
from tests.outside.search import tasks as search_tasks

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

StartWorker = Callable[..., WorkerProcess]


def hostile_row(task_name: str, *args: object) -> uuid.UUID:
    job = Job.objects.enqueue("tests.outside.placeholder.task", args=list(args), backend="default")
    Job.objects.filter(pk=job.pk).update(task_name=task_name)
    return job.id


def test_a_worker_runs_a_package_task_and_dead_letters_hostile_rows(
    start_worker: StartWorker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    side_effect = tmp_path / "side-effect.txt"
    pwned = tmp_path / "pwned.txt"
    monkeypatch.setenv("ARCATURE_TEST_SIDE_EFFECT_FILE", str(side_effect))
    index = tmp_path / "index.txt"
    indexed = search_tasks.update_index.enqueue("blog.Post", [1, 2, 3], str(index))
    hostile = {
        "os.system": ("standard library", hostile_row("os.system", f"touch {pwned}")),
        "subprocess.run": (
            "standard library",
            hostile_row("subprocess.run", ["touch", str(pwned)]),
        ),
        "side effect": (
            "does not define a decorated function",
            hostile_row("tests.outside.side_effect.anything"),
        ),
        "decorated non-task": (
            "not a django.tasks Task",
            hostile_row("tests.outside.not_tasks.cached"),
        ),
        "missing": ("No module named", hostile_row("tests.outside.gone.task")),
        "odd": ("not a Python name", hostile_row("os.system;id")),
    }

    worker = start_worker("--burst", "--worker-id", "imports-1")
    assert worker.wait(60) == 0, worker.log

    result = search_tasks.update_index.get_result(indexed.id)
    assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert (result.return_value, result.worker_ids) == (3, ["imports-1"])
    assert index.read_text() == "blog.Post:1\nblog.Post:2\nblog.Post:3\n"
    for what, (reason, job_id) in hostile.items():
        job = Job.objects.get(pk=job_id)
        assert (job.status, job.error_kind) == ("dead", "unknown"), what
        assert reason in job.last_error, (what, job.last_error)
    assert not pwned.exists()
    assert not side_effect.exists()
