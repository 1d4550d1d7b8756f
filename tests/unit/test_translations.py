"""The shipped catalogues are complete, current and compiled; no visible string is unmarked.

Why each check: a catalogue that ``makemessages`` would change is stale (a new
string shows in English, a removed one lingers for translators); an empty or
fuzzy entry shows English too; a placeholder lost in a translation raises
``KeyError`` at the moment the admin formats the message; a ``.mo`` not rebuilt
after an edit of the ``.po`` ships the old text (the wheel carries the ``.mo``).
These need GNU gettext (``msgfmt``, ``xgettext``, ``msgmerge``): in CI
(``CI=true``) its absence fails the run; on a laptop without it they skip, saying so.
"""

from __future__ import annotations

import gettext
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import polib
import pytest

from tests import i18n_scan

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "django_arcature"
LOCALE = PACKAGE / "locale"
LANGUAGES = ("de", "es", "fr", "ja", "pt_BR", "zh_Hans")
GETTEXT_TOOLS = ("msgfmt", "xgettext", "msgmerge")

#: %(name)s, %d, %s, %r ... and str.format's {} / {name}.
PLACEHOLDER = re.compile(
    r"%\([^)]+\)[#0 +-]*\d*(?:\.\d+)?[diouxXeEfFgGcrsa]|%[#0 +-]*\d*(?:\.\d+)?[diouxXeEfFgGcrsa]"
    r"|\{[^{}]*\}"
)


def need_gettext() -> None:
    missing = [tool for tool in GETTEXT_TOOLS if shutil.which(tool) is None]
    if not missing:
        return
    message = (
        f"GNU gettext is not installed (missing {', '.join(missing)}): apt-get install gettext"
    )
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        pytest.fail(message)
    pytest.skip(f"NOT CHECKED — {message}")


def catalogue(language: str) -> Path:
    return LOCALE / language / "LC_MESSAGES" / "django.po"


def entries(po: polib.POFile) -> set[tuple[str | None, str, str]]:
    """What identifies an entry, without headers, dates, locations or translations."""
    return {(e.msgctxt, e.msgid, e.msgid_plural) for e in po if not e.obsolete}


def placeholders(text: str) -> Counter[str]:
    return Counter(PLACEHOLDER.findall(text))


def test_the_six_languages_ship() -> None:
    shipped = sorted(p.parent.parent.name for p in LOCALE.glob("*/LC_MESSAGES/django.po"))
    assert shipped == sorted(LANGUAGES)
    for language in LANGUAGES:
        assert catalogue(language).with_suffix(".mo").is_file(), f"{language}: no compiled .mo"


def test_makemessages_would_not_change_a_catalogue(tmp_path: Path) -> None:
    need_gettext()
    copy = tmp_path / "django_arcature"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.mo"))
    command = [sys.executable, "-m", "django", "makemessages", "--no-obsolete"]
    command += [f"--locale={language}" for language in LANGUAGES]
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    subprocess.run(command, cwd=copy, env=environment, check=True, capture_output=True)
    problems = []
    for language in LANGUAGES:
        shipped = entries(polib.pofile(str(catalogue(language))))
        current = entries(polib.pofile(str(copy / "locale" / language / "LC_MESSAGES/django.po")))
        for entry in sorted(current - shipped, key=str):
            problems.append(f"{language}: missing {entry!r}")
        for entry in sorted(shipped - current, key=str):
            problems.append(f"{language}: obsolete {entry!r}")
    assert not problems, (
        "the catalogues are out of date; run makemessages (docs/reference/admin.md, "
        "Languages), translate, compilemessages:\n" + "\n".join(problems)
    )


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_entry_is_translated_with_its_placeholders(language: str) -> None:
    po = polib.pofile(str(catalogue(language)))
    plurals = re.search(r"nplurals=(\d+)", po.metadata["Plural-Forms"])
    assert plurals is not None, f"{language}: no Plural-Forms header"
    problems = []
    for entry in po:
        if entry.obsolete:
            problems.append(f"obsolete entry left in: {entry.msgid!r}")
            continue
        if "fuzzy" in entry.flags:
            problems.append(f"fuzzy: {entry.msgid!r}")
        if entry.msgid_plural:
            forms = [entry.msgstr_plural[i] for i in sorted(entry.msgstr_plural)]
            if len(forms) != int(plurals.group(1)):
                problems.append(
                    f"{len(forms)} plural forms, not {plurals.group(1)}: {entry.msgid!r}"
                )
                continue
            # One form (ja, zh): it serves every count, as the English plural does.
            sources = [entry.msgid_plural] if len(forms) == 1 else [entry.msgid]
            sources += [entry.msgid_plural] * (len(forms) - len(sources))
            pairs = list(zip(sources, forms, strict=True))
        else:
            pairs = [(entry.msgid, entry.msgstr)]
        for source, translation in pairs:
            if not translation.strip():
                problems.append(f"untranslated: {source!r}")
            elif placeholders(source) != placeholders(translation):
                problems.append(
                    f"placeholders differ: {source!r} has {sorted(placeholders(source))}, "
                    f"{translation!r} has {sorted(placeholders(translation))}"
                )
    assert not problems, f"{language}:\n" + "\n".join(problems)


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_committed_mo_is_the_po_compiled(language: str, tmp_path: Path) -> None:
    need_gettext()
    source = catalogue(language)
    fresh = tmp_path / "django.mo"
    # --check: msgfmt also verifies the python-format strings and the header.
    subprocess.run(
        ["msgfmt", "--check", "-o", str(fresh), str(source)], check=True, capture_output=True
    )
    with fresh.open("rb") as f:
        compiled = gettext.GNUTranslations(f)
    with source.with_suffix(".mo").open("rb") as f:
        committed = gettext.GNUTranslations(f)
    assert committed.info() == compiled.info()
    assert committed._catalog == compiled._catalog, (  # type: ignore[attr-defined]
        f"{language}: django.mo is not django.po compiled; run compilemessages and commit it"
    )


def test_no_visible_string_is_left_unmarked() -> None:
    unmarked = i18n_scan.scan_package()
    assert not unmarked, (
        "strings people read are not marked for translation (wrap them in gettext, "
        "or list them in tests/i18n_scan.py ALLOWED with the reason):\n"
        + "\n".join(map(str, unmarked))
    )


def test_the_scanner_finds_unmarked_template_text() -> None:
    template = """{% load i18n %}
<h2>Queues</h2>
<p title="Refresh the page" class="arcature-help">{% translate "Ready" %} ~ 12 -</p>
{% blocktranslate %}Dead letters{% endblocktranslate %}
{% comment %}Notes for maintainers{% endcomment %}
<button aria-label="{% translate 'Close' %}">&times;</button>
<script>const label = "not shown";</script>
<img alt="A chart">"""
    found = i18n_scan.scan_template(template, "snippet.html")
    assert [(u.line, u.text) for u in found] == [
        (2, "Queues"),
        (3, "Refresh the page"),
        (8, "A chart"),
    ]


def test_the_scanner_finds_unmarked_python_text() -> None:
    module = """
from django.contrib import admin
from django.core.checks import Error, Warning
from django.db import models
from django.utils.translation import gettext as _, gettext_lazy, ngettext

class JobAdmin(admin.ModelAdmin):
    @admin.action(description="Requeue them")
    def requeue(self, request, queryset):
        self.message_user(request, f"Requeued {queryset.count()} jobs.")
        self.message_user(request, _("Requeued %(count)d.") % {"count": 1})
        self.message_user(request, ngettext("%d job", "%d jobs", 2) % 2)

    @admin.display(description=gettext_lazy("Status"))
    def status(self, obj):
        return obj.status
    status.short_description = "State"

class Job(models.Model):
    name = models.CharField(max_length=9, verbose_name="name", help_text=_("Unique."))

    class Meta:
        verbose_name = "job"
        verbose_name_plural = gettext_lazy("jobs")

def check():
    return [
        Error("USE_TZ is off", hint=_("Turn it on."), id="arcature.E001"),
        Warning(_("In %(name)s") % {"name": "x"}, hint="Set " + "it", id="arcature.W001"),
    ]
"""
    found = i18n_scan.scan_python(module, "snippet.py")
    assert [(u.line, u.text) for u in found] == [
        (8, "Requeue them"),
        (10, "Requeued"),
        (10, "jobs."),
        (17, "State"),
        (20, "name"),
        (23, "job"),
        (28, "USE_TZ is off"),
        (29, "Set"),
        (29, "it"),
    ]


@pytest.mark.parametrize(
    ("language", "expected"),
    [
        ("fr", "est une base SQLite en mémoire"),
        ("ja", "インメモリの SQLite データベースです"),
    ],
)
def test_a_system_check_speaks_the_active_language(language: str, expected: str) -> None:
    """The compiled catalogue is the one Django loads: a check message comes out translated."""
    from django.utils import translation

    from django_arcature.checks.settings import database_messages

    memory = {"jobs": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
    with translation.override(language):
        (message,) = database_messages(memory, (3, 45, 0))
    assert expected in message.msg
    assert "'jobs'" in message.msg
    assert message.hint is not None
    assert "db.sqlite3" in message.hint


COMMAND = """
import argparse
from django.core.management.base import BaseCommand, CommandError
from django.utils.translation import gettext, gettext_lazy, pgettext
from django_arcature.management.wording import Translated

def _port(text):
    raise argparse.ArgumentTypeError(f"not a port: {text}")

class Command(BaseCommand):
    help = "Pause a queue."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="Print JSON.")
        parser.add_argument("--force", help=gettext("Pause it anyway."))

    def handle(self, *args, **options):
        self.stdout.write(json.dumps({"queue": "email"}))
        self.stdout.write(f"queue {options['name']} paused")
        self.stderr.write(self.style.WARNING("Careful"))
        self.stdout.write(gettext("%(name)s: %(state)s") % {"name": "x", "state": "running"})
        self.stdout.write(gettext("%(name)s: %(state)s") % {"state": pgettext("q", "paused")})
        raise CommandError("needs a queue name")

class Other(BaseCommand):
    help = Translated(gettext_lazy("Resume a queue."))
"""


def test_the_scanner_finds_unmarked_command_text() -> None:
    """What a person reads from a command: its help, its options' help, what it writes,
    and its errors; a JSON line has no literal with words in it."""
    found = i18n_scan.scan_python(COMMAND, "management/commands/arcature_demo.py")
    assert [(u.line, u.text) for u in found] == [
        (8, "not a port:"),
        (11, "Pause a queue."),
        (14, "Print JSON."),
        (19, "paused"),
        (19, "queue"),
        (20, "Careful"),
        (21, "running"),
        (23, "needs a queue name"),
    ]


def test_the_scanner_reads_command_rules_only_in_management_modules() -> None:
    """``worker/health.py`` builds an argparse parser too, without Django on purpose
    (``python -m django_arcature.worker.health``): its help is not a command's."""
    assert i18n_scan.scan_python(COMMAND, "worker/health.py") == []
