"""``make demo``: the example project end to end on a fresh SQLite file.

Migrates, enqueues the mixed batch (``seed_demo``), runs a real worker process
until nothing is due (``arcature_worker --burst``), and prints where every job
ended. Set DATABASE_URL to run it against PostgreSQL or MySQL instead.
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
    env_url = os.environ.get("DATABASE_URL")
    if not env_url:
        database = PROJECT.parent / "var" / "demo.sqlite3"
        for leftover in database.parent.glob(database.name + "*"):
            leftover.unlink()  # start from nothing, so the summary is this run's
        os.environ["DATABASE_URL"] = f"sqlite:///{database}"
    run("migrate", "--verbosity", "0")
    run("seed_demo", "--slow-seconds", "1")
    run("arcature_worker", "--burst", "--concurrency", "4")
    run("demo_report")
    python = os.path.relpath(sys.executable)
    manage = os.path.relpath(PROJECT / "manage.py")
    url = os.environ["DATABASE_URL"]
    print(
        "\nThe reminder is still pending: it is scheduled an hour ahead. The mail the jobs"
        " sent is in var/mail/. To browse the jobs in the admin:"
        f"\n  DATABASE_URL={url} {python} {manage} createsuperuser"
        f"\n  DATABASE_URL={url} {python} {manage} runserver"
        "\nthen open http://127.0.0.1:8000/admin/ (the queue dashboard is at"
        " /admin/django_arcature/job/dashboard/)"
    )


if __name__ == "__main__":
    main()
