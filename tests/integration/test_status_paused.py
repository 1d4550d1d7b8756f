"""``arcature_status`` shows which queues are paused, with or without jobs waiting.

It listed depths only: a paused queue looked like a stuck one (ready jobs, an
old "oldest ready"), and a paused queue without jobs did not show at all.
"""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from django_arcature.models import Job
from django_arcature.queues.control import pause

pytestmark = pytest.mark.django_db(transaction=True)


def status(*args: str) -> str:
    out = StringIO()
    call_command("arcature_status", *args, stdout=out)
    return out.getvalue()


def test_paused_queues_are_marked_in_the_table_and_the_json() -> None:
    Job.objects.enqueue_many("tests.noop", [(), ()], queue="email")
    Job.objects.enqueue("tests.noop", queue="default")
    pause("email")
    pause("reports")  # paused ahead of any job
    lines = status().splitlines()
    header = lines[0].split()
    assert header[-1] == "paused"
    rows = {line.split()[0]: line.split() for line in lines[1:4]}
    assert rows["email"][-1] == "yes"
    assert rows["email"][1] == "2"
    assert rows["default"][-1] == "-"
    assert rows["reports"][1:4] == ["0", "0", "0"]
    assert rows["reports"][-1] == "yes"
    report = json.loads(status("--json"))
    paused = {q["queue"]: q["paused"] for q in report["queues"]}
    assert paused == {"default": False, "email": True, "reports": True}


def test_only_paused_queues_without_jobs_still_print_a_table() -> None:
    pause("reports")
    text = status()
    assert "No pending or running jobs." not in text
    assert text.splitlines()[1].split()[0] == "reports"
