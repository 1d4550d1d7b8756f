"""The test settings on a SQLite file left in Django's default DEFERRED mode.

What ``django-admin startproject`` gives a newcomer: ``arcature.W002`` must not
nag every command about it, only the worker and ``check --deploy``.
"""

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES

DATABASES["default"]["OPTIONS"] = {"init_command": "PRAGMA journal_mode=WAL;"}
