# ruff: noqa: RUF001  (the typography of the translations, e.g. a French apostrophe, is asserted)
"""Management commands speak the project's language; what programs read stays English.

Why: an operator of a French project reads ``arcature_queue``'s answers and
``--help`` in French, as the admin speaks to them. Django (since 2.1) leaves
translations active in a command (only ``@no_translations`` ones such as
``migrate`` turn them off), so the language is ``settings.LANGUAGE_CODE``, or the
one a caller activated around ``call_command``. The subprocess tests prove the
first from a real ``manage.py``, which no in-process test can: a test runner may
have activated a language of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone, translation

from django_arcature.management.wording import width
from django_arcature.models import Job, JobStatus
from django_arcature.queues.control import pause

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]

#: For the tests that run ``manage.py`` (see ``manage``): a project on a SQLite file
#: of its own, the same on every database; the in-process tests run everywhere.
OWN_SQLITE_PROJECT = pytest.mark.only_on(
    "sqlite", reason="it runs its own project on a SQLite file, whatever the database under test"
)


def manage(settings: str, database: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": settings,
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": f"sqlite:///{database}",
    }
    env.pop("LANGUAGE", None)
    env["LANG"] = "de_DE.UTF-8"  # the shell's language is not the project's: ignored
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@OWN_SQLITE_PROJECT
def test_manage_py_speaks_language_code_in_help_and_output(tmp_path: Path) -> None:
    database = tmp_path / "fr.sqlite3"
    helped = manage("tests.testapp.french_settings", database, "arcature_queue", "--help")
    assert helped.returncode == 0, helped.stderr
    text = " ".join(helped.stdout.split())  # argparse wraps the lines
    assert "Suspend ou reprend une file pour tous les workers" in text
    assert "Sans cette option, un tel nom est refusé comme probable faute de frappe." in text
    assert "L’alias de la base qui contient la table des tâches." in text
    assert "Pause or resume a queue" not in text

    assert manage("tests.testapp.french_settings", database, "migrate", "-v", "0").returncode == 0
    paused = manage(
        "tests.testapp.french_settings", database, "arcature_queue", "pause", "x", "--force"
    )
    assert (paused.stdout, paused.stderr) == ("file x suspendue\n", "")
    listed = manage("tests.testapp.french_settings", database, "arcature_queue", "list")
    assert listed.stdout == "x : suspendue, 0 en attente, 0 en cours\n", listed.stderr
    refused = manage("tests.testapp.french_settings", database, "arcature_queue", "pause", "y")
    assert refused.returncode == 1
    assert "vérifiez l’orthographe" in refused.stderr
    # The same project in English, and the shell's LANG (de) changes nothing.
    english = manage("tests.settings", database, "arcature_queue", "list")
    assert english.stdout == "x: paused, 0 pending, 0 running\n", english.stderr


@OWN_SQLITE_PROJECT
def test_an_option_error_is_in_the_project_language(tmp_path: Path) -> None:
    """argparse's own frame stays in Python's English; the reason is ours."""
    done = manage(
        "tests.testapp.french_settings", tmp_path / "db.sqlite3", "arcature_status", "--since", "0"
    )
    assert done.returncode == 2
    assert "doit être un nombre de minutes supérieur à 0, pas 0" in done.stderr


def test_call_command_speaks_the_active_language() -> None:
    Job.objects.enqueue_many("tests.noop", [(), ()], queue="email")
    for language, paused, listed in (
        ("ja", "キュー email を一時停止しました", "email：一時停止中、待機中 2 件、実行中 0 件"),
        ("de", "Warteschlange email pausiert", "email: pausiert, 2 wartend, 0 laufend"),
        ("es", "cola email pausada", "email: pausada, 2 pendientes, 0 en ejecución"),
    ):
        out = StringIO()
        with translation.override(language):
            call_command("arcature_queue", "pause", "email", stdout=out)
            call_command("arcature_queue", "list", stdout=out)
            call_command("arcature_queue", "resume", "email", stdout=StringIO())
        assert out.getvalue().splitlines() == [paused, listed]


@override_settings(LANGUAGE_CODE="pt-br")
def test_without_an_active_language_call_command_speaks_language_code() -> None:
    Job.objects.enqueue_many("tests.noop", [()], queue="email")
    out = StringIO()
    # As in manage.py: no language activated, so gettext falls back to LANGUAGE_CODE
    # (translation.override(None) would be "no translation at all", i.e. English).
    translation.deactivate()
    try:
        call_command("arcature_status", stdout=out)
    finally:
        translation.deactivate()
    lines = out.getvalue().splitlines()
    assert lines[0].split() == [
        "fila",
        "prontos",
        "agendados",
        "em",
        "execução",
        "pronto",
        "mais",
        "antigo",
        "pausada",
    ]
    assert lines[-2] == "Nenhuma falha nos últimos 60 minutos."
    assert lines[-1] == "Jobs descartados mantidos para inspeção: 0."


def test_the_status_table_lines_up_in_japanese() -> None:
    """A Japanese heading takes two terminal columns a character: padding by len()
    would push every column after it out of line with the rows."""
    Job.objects.enqueue_many("tests.noop", [()] * 12, queue="a-long-queue-name")
    pause("a-long-queue-name")
    Job.objects.enqueue_many("tests.noop", [()], queue="b")
    out = StringIO()
    with translation.override("ja"):
        call_command("arcature_status", stdout=out)
    header, first, second = out.getvalue().splitlines()[:3]
    assert header.startswith("キュー")
    assert "一時停止" in header
    assert first.endswith("はい")
    assert second.endswith("-")
    # Every column ends at the same terminal column in the header and in each row:
    # the text before the last column has one width.
    assert len({width(line.rsplit("  ", 1)[0]) for line in (header, first, second)}) == 1


def test_json_and_error_kinds_stay_as_they_are_in_every_language() -> None:
    """--json is read by scripts: its keys and values must not follow the language."""
    Job.objects.enqueue_many("tests.noop", [()], queue="email")
    Job.objects.enqueue("tests.noop", queue="email")
    dead = Job.objects.filter(queue="email").order_by("-id").values_list("id", flat=True)[0]
    Job.objects.filter(pk=dead).update(
        status=JobStatus.DEAD, error_kind="timeout", failed_at=timezone.now()
    )
    reports = []
    for language in ("en", "fr", "zh-hans"):
        out = StringIO()
        with translation.override(language):
            call_command("arcature_status", "--json", stdout=out)
        report = json.loads(out.getvalue())
        for queue in report["queues"]:
            assert isinstance(queue.pop("oldest_ready_seconds"), float)  # the clock moves on
        reports.append(report)
    assert reports[0] == reports[1] == reports[2]
    assert set(reports[0]["queues"][0]) == {
        "queue",
        "ready",
        "scheduled",
        "running",
        "paused",
    }
    out = StringIO()
    with translation.override("fr"):
        call_command("arcature_status", stdout=out)
    # The table's sentence is French; the error kind inside it is the stored value.
    assert "En échec au cours des 60 dernières minutes : 1 timeout." in out.getvalue()


def test_prune_reports_its_rules_in_whole_translated_sentences() -> None:
    out = StringIO()
    with translation.override("de"):
        call_command(
            "arcature_prune", "--dry-run", "--older-than", "36h", "--status", "dead", stdout=out
        )
    assert out.getvalue().splitlines() == [
        "würde 0 Jobs löschen: aufgegebene Jobs, älter als 1 Tag, 12 Stunden, in allen "
        "Warteschlangen",
        "würde insgesamt 0 Jobs löschen (Probelauf)",
    ]


@OWN_SQLITE_PROJECT
def test_the_health_probe_line_stays_english(tmp_path: Path) -> None:
    """The probe prints what ``python -m django_arcature.worker.health`` prints, which
    loads no Django: orchestrator events and alerts match on that one wording."""
    done = manage(
        "tests.testapp.french_settings",
        tmp_path / "db.sqlite3",
        "arcature_health",
        "--file",
        str(tmp_path / "missing.json"),
    )
    assert done.returncode == 1
    assert done.stderr.startswith("unhealthy: no health file at ")
