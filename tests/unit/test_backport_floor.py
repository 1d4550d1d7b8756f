"""The django-tasks backport versions the package declares are ones it works with.

django-tasks 0.11 and older spell the statuses differently (``SUCCEEDED`` rather
than ``SUCCESSFUL``), so with ``django-tasks>=0.8`` a new user on Django 5.2 got
an ``AttributeError`` from deep inside the backend the first time ``TASKS`` was
read. The extra, the test matrix and the compat layer's floor must agree.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from django_arcature.tasks.compat import BACKPORT_MINIMUM, backport_too_old

ROOT = Path(__file__).resolve().parents[2]
FLOOR = ".".join(map(str, BACKPORT_MINIMUM))


def test_the_extra_asks_for_a_backport_the_package_supports() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["optional-dependencies"]["tasks-backport"] == [
        f"django-tasks>={FLOOR}"
    ]


def test_the_django_52_test_environment_uses_the_same_floor() -> None:
    tox = (ROOT / "tox.ini").read_text()
    assert re.findall(r"dj52: (django-tasks\S*)", tox) == [f"django-tasks>={FLOOR}"]


def test_an_older_backport_is_named_with_the_version_to_install() -> None:
    message = backport_too_old("0.11.0")
    assert message is not None
    assert "django-tasks 0.12 or later" in message
    assert "found 0.11.0" in message
    assert backport_too_old("0.12.0") is None
    assert backport_too_old("1.0") is None
