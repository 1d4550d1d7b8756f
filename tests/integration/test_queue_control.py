"""Queue control on a real database: pause flags, exclusions and the capped claim."""

from __future__ import annotations

import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_arcature.models import Job, JobStatus
from django_arcature.queues.control import pause, paused_queues, resume
from django_arcature.queues.gate import QueueGate
from django_arcature.queues.limits import QueueLimit
from django_arcature.queues.models import QueueState

pytestmark = pytest.mark.django_db(transaction=True)


def enqueue(queue: str, n: int = 1) -> None:
    Job.objects.enqueue_many("tests.noop", [() for _ in range(n)], queue=queue)


def claimed_queues(gate: QueueGate, want: int = 50) -> list[str]:
    return sorted(job.queue for job in gate.claim(Job.objects, "w1", 60, want))


def test_paused_queue_is_not_claimed_and_resume_brings_it_back() -> None:
    enqueue("email", 2)
    enqueue("default", 1)
    assert pause("email")
    assert not pause("email")  # already paused
    assert paused_queues("default") == {"email"}
    gate = QueueGate("default", refresh_seconds=0)
    assert claimed_queues(gate) == ["default"]
    assert resume("email")
    gate.invalidate()
    assert claimed_queues(gate) == ["email", "email"]


def test_paused_queue_named_explicitly_is_not_claimed() -> None:
    enqueue("email", 1)
    pause("email")
    gate = QueueGate("default", queues=["email"], refresh_seconds=0)
    assert claimed_queues(gate) == []


def test_pause_flags_are_cached_for_the_refresh_interval() -> None:
    enqueue("email", 2)
    gate = QueueGate("default", refresh_seconds=3600)
    assert claimed_queues(gate, want=1) == ["email"]
    pause("email")
    assert claimed_queues(gate, want=1) == ["email"]  # not re-read yet
    gate.invalidate()  # what a PostgreSQL notification does
    assert claimed_queues(gate, want=1) == []


def test_excluded_queues_are_never_claimed() -> None:
    enqueue("video", 2)
    enqueue("email", 1)
    enqueue("default", 1)
    gate = QueueGate("default", exclude=["video"])
    assert claimed_queues(gate) == ["default", "email"]
    narrow = QueueGate("default", queues=["video", "email"], exclude=["video"])
    enqueue("email", 1)
    assert claimed_queues(narrow) == ["email"]


def test_concurrency_limit_caps_the_claim_until_jobs_finish() -> None:
    enqueue("limited", 10)
    enqueue("default", 2)
    gate = QueueGate("default", limits={"limited": QueueLimit(concurrency=3)})
    first = gate.claim(Job.objects, "w1", 60, 50)
    assert sorted(job.queue for job in first) == ["default"] * 2 + ["limited"] * 3
    other_worker = QueueGate(
        "default", limits={"limited": QueueLimit(concurrency=3)}, refresh_seconds=0
    )
    assert other_worker.claim(Job.objects, "w2", 60, 50) == []
    done = next(job for job in first if job.queue == "limited")
    Job.objects.mark_succeeded(done.id, done.claim_token)
    again = other_worker.claim(Job.objects, "w2", 60, 50)
    assert [job.queue for job in again] == ["limited"]
    assert Job.objects.filter(queue="limited", status=JobStatus.RUNNING).count() == 3


def test_limited_queue_is_claimed_before_a_backlog_of_unlimited_ones() -> None:
    enqueue("default", 20)
    enqueue("limited", 2)
    gate = QueueGate("default", limits={"limited": QueueLimit(concurrency=5)})
    assert claimed_queues(gate, want=5) == ["default"] * 3 + ["limited"] * 2


def test_a_full_limited_queue_is_left_alone_briefly() -> None:
    enqueue("limited", 2)
    gate = QueueGate("default", limits={"limited": QueueLimit(concurrency=1)}, refresh_seconds=5)
    assert claimed_queues(gate) == ["limited"]
    assert claimed_queues(gate) == []  # full: quiet for a moment
    Job.objects.filter(queue="limited", status=JobStatus.RUNNING).update(
        status=JobStatus.CANCELLED, claim_token=None
    )
    assert claimed_queues(gate) == []  # still quiet
    gate.invalidate()  # a notification (or the next refresh) ends it
    assert claimed_queues(gate) == ["limited"]


def test_rate_limit_caps_starts_per_period() -> None:
    enqueue("rated", 10)
    gate = QueueGate("default", limits={"rated": QueueLimit(rate=4, per_seconds=3600)})
    assert len(gate.claim(Job.objects, "w1", 60, 3)) == 3
    assert len(gate.claim(Job.objects, "w1", 60, 3)) == 1
    assert gate.claim(Job.objects, "w1", 60, 3) == []
    assert len(QueueState.objects.get(name="rated").recent_starts) == 4


def test_limited_queue_still_honours_pause() -> None:
    enqueue("limited", 3)
    pause("limited")
    gate = QueueGate("default", limits={"limited": QueueLimit(concurrency=3)}, refresh_seconds=0)
    assert gate.claim(Job.objects, "w1", 60, 50) == []


def test_arcature_queue_command() -> None:
    enqueue("email", 2)
    out = StringIO()
    call_command("arcature_queue", "pause", "email", stdout=out)
    call_command("arcature_queue", "list", stdout=out)
    call_command("arcature_queue", "resume", "email", stdout=out)
    call_command("arcature_queue", "resume", "email", stdout=out)
    text = out.getvalue()
    assert "queue email paused" in text
    assert "email: paused, 2 pending, 0 running" in text
    assert "queue email resumed" in text
    assert "queue email was not paused" in text
    with pytest.raises(CommandError, match="needs a queue name"):
        call_command("arcature_queue", "pause")


def test_pausing_a_queue_nothing_names_says_to_check_the_spelling() -> None:
    """ "emial" for "email" would leave the real queue running while the operator
    believes it paused: the command refuses, says that no job handler,
    ARCATURE["QUEUES"] entry or live job names the queue (``--force`` pauses it
    anyway), and ``list`` does not show an unknown name as a running queue."""
    enqueue("email", 1)
    out = StringIO()
    call_command("arcature_queue", "pause", "email", stdout=out)
    assert out.getvalue() == "queue email paused\n"
    with pytest.raises(CommandError) as refused:
        call_command("arcature_queue", "pause", "emial", stdout=StringIO())
    text = str(refused.value)
    assert text.startswith("not pausing 'emial'")
    assert "no @job, ARCATURE['QUEUES'] entry or live job names it" in text
    assert "did you mean 'email'?" in text
    out = StringIO()
    call_command("arcature_queue", "list", "nosuch", stdout=out)
    assert out.getvalue() == (
        "nosuch: no such queue (no @job, ARCATURE['QUEUES'] entry, pause flag or live job)\n"
    )


# A fresh project on a SQLite file of its own: the same run on every database. The
# command's database writes are test_arcature_queue_command's, on every database.
@pytest.mark.only_on(
    "sqlite", reason="it runs its own project on a SQLite file, whatever the database under test"
)
def test_pause_and_resume_print_one_line_each_in_a_fresh_project(tmp_path: Path) -> None:
    """With Django's default logging, a log record at WARNING or above reaches stderr
    through Python's last-resort handler: the command's own line must not be
    repeated there, so the shell shows what docs/queues.md shows."""
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.testapp.default_logging_settings",
        "PYTHONPATH": str(root),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'queues.sqlite3'}",
    }

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "django", *args],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    assert manage("migrate", "-v", "0").returncode == 0
    # As on the page, the queue has jobs waiting (a queue nothing names gets a note).
    enqueued = manage(
        "shell",
        "-c",
        "from django_arcature.models import Job; "
        "Job.objects.enqueue('tests.add', args=[1, 2], queue='email')",
    )
    assert enqueued.returncode == 0, enqueued.stderr
    for action, line in (("pause", "queue email paused"), ("resume", "queue email resumed")):
        done = manage("arcature_queue", action, "email")
        assert done.returncode == 0, done.stderr
        assert (done.stdout, done.stderr) == (f"{line}\n", "")
