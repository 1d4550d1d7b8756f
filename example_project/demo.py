"""``make demo``: the example project end to end on a fresh SQLite file.

The file is the example project's own default, ``var/example-project.sqlite3``
(see ``demo_site/settings.py``), so the step-by-step commands in the docs, the
admin and ``runserver`` afterwards all see the jobs this demo ran. It is deleted
first, so the summary is this run's. Migrates, enqueues the mixed batch
(``seed_demo``), runs a real worker process until nothing is due
(``arcature_worker --burst``), and prints where every job ended. Set
DATABASE_URL to run it against PostgreSQL or MySQL instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parent
MANAGE = [sys.executable, str(PROJECT / "manage.py")]


def run(*args: str) -> None:
    print(f"\n$ manage.py {' '.join(args)}", flush=True)
    subprocess.run([*MANAGE, *args], check=True)


def main() -> None:
    if not os.environ.get("DATABASE_URL"):
        database = default_database()
        for leftover in database.parent.glob(database.name + "*"):
            leftover.unlink()  # start from nothing (the -wal and -shm files too)
        print(f"Using a fresh SQLite database: {os.path.relpath(database)}")
    run("migrate", "--verbosity", "0")
    run("seed_demo", "--slow-seconds", "1")
    run("arcature_worker", "--burst", "--concurrency", "4")
    run("demo_report")
    python = os.path.relpath(sys.executable)
    manage = os.path.relpath(PROJECT / "manage.py")
    print(
        "\nThe reminder is still pending: it is scheduled an hour ahead. The mail the jobs"
        " sent is in var/mail/. To browse the jobs in the admin:"
        f"\n  {python} {manage} createsuperuser"
        f"\n  {python} {manage} runserver"
        "\nthen open http://127.0.0.1:8000/admin/ (the queue dashboard is at"
        " /admin/django_arcature/job/dashboard/)"
    )


def default_database() -> Path:
    """The SQLite file the example project's settings use when DATABASE_URL is unset."""
    sys.path.insert(0, str(PROJECT))
    from demo_site.settings import DEFAULT_SQLITE_PATH

    return DEFAULT_SQLITE_PATH


if __name__ == "__main__":
    main()
