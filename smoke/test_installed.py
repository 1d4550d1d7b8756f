"""The package under test is the installed wheel, and it carries its data files."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import django_arcature

PACKAGE = Path(django_arcature.__file__).resolve().parent


def test_the_package_comes_from_site_packages() -> None:
    assert "site-packages" in PACKAGE.parts, PACKAGE
    assert Path(sys.prefix) in PACKAGE.parents, (PACKAGE, sys.prefix)
    checkout = os.environ.get("SMOKE_CHECKOUT")
    if checkout:  # the checkout's own source folder would mean an editable install
        assert Path(checkout).resolve() / "django_arcature" != PACKAGE


def test_the_wheel_holds_templates_static_migrations_and_typing() -> None:
    assert (PACKAGE / "py.typed").is_file()
    assert (PACKAGE / "templates" / "django_arcature" / "admin" / "dashboard.html").is_file()
    assert (PACKAGE / "static" / "django_arcature" / "admin.css").is_file()
    assert (PACKAGE / "migrations" / "0001_initial.py").is_file()


def test_no_migration_is_missing() -> None:
    from django.core.management import call_command

    call_command("makemigrations", "django_arcature", "--check", "--dry-run", verbosity=0)
