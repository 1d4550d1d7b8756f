"""A page that names the migration adding a field names the one that adds it.

Run with the other documentation tests (``pytest docs --ds=demo_site.settings``).
The pages say "ids stored since migration NNNN" so that an operator can tell which
rows predate it; a wrong number sends them to the wrong migration.
"""

from __future__ import annotations

import re
from pathlib import Path

from django.db import migrations
from django.db.migrations.loader import MigrationLoader

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
_MIGRATION = re.compile(r"\bmigrations? (\d{4})\b")
_NAME = re.compile(r"`([A-Za-z_][\w.]*)`")


def added_by() -> dict[str, str]:
    """Field names added to an existing model, by the number of the migration adding them."""
    loader = MigrationLoader(None, ignore_no_migrations=True)
    found: dict[str, str] = {}
    for (app, name), migration in loader.disk_migrations.items():
        if app != "django_arcature":
            continue
        for operation in migration.operations:
            if isinstance(operation, migrations.AddField):
                found[operation.name] = name[:4]
    return found


def mismatches(text: str, added: dict[str, str]) -> list[str]:
    problems = []
    for paragraph in re.split(r"\n\s*\n", text):
        named = set(_MIGRATION.findall(paragraph))
        if not named:
            continue
        for identifier in _NAME.findall(paragraph):
            field = identifier.rsplit(".", 1)[-1]
            number = added.get(field)
            if number is not None and number not in named:
                problems.append(
                    f"`{identifier}` is added by migration {number}, "
                    f"the paragraph says {', '.join(sorted(named))}"
                )
    return problems


def test_every_migration_named_beside_a_field_is_the_one_adding_it() -> None:
    added = added_by()
    problems = [
        f"{page.relative_to(ROOT)}: {problem}"
        for page in PAGES
        for problem in mismatches(page.read_text(encoding="utf-8"), added)
    ]
    assert not problems, "\n".join(problems)


def test_the_check_reads_the_migrations_and_catches_a_wrong_number() -> None:
    added = added_by()
    assert added["on_success_job_id"] == "0016"
    assert mismatches("ids (`on_finish_job_id`, migration 0017)", added) == [
        "`on_finish_job_id` is added by migration 0016, the paragraph says 0017"
    ]
