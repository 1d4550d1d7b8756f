"""The admin pages, one-by-one enqueue and the sweep on a big job table, against a small one.

    .venv/bin/python benchmarks/bigadmin.py --db postgres --prefix arc_plan10m --pending 100000
    .venv/bin/python benchmarks/bigadmin.py --db mysql,sqlite --pending 100000

Issue 13 asks that the admin pages keep at least 90 % of their speed when the job
table holds millions of finished rows. ``benchmarks/bigtable.py`` builds that table
(and is reused here for it: ``<prefix>_big``, ``--finished`` rows, built once, kept);
the small database ``<prefix>_small`` is truncated and given ``--small-finished``
finished rows of the same shape, so that every page has something to show on both.
Both then get ``--pending`` pending jobs.

Each page is fetched with Django's test ``Client``, logged in as a superuser, in a
child process per database and round; the big and the small database take turns
(``--rounds``), so a change in the machine's load hits both. Per round every page is
fetched once to warm up, then ``--requests`` times, timed. The ratio is the small
table's median time over the big table's: the big table's speed as a fraction of the
small one's (at least 0.9 is the goal).

Then one-by-one enqueue and the sweep are timed the same way, in alternating rounds
(bigtable.py measured each once per run, which left them noisy).

Results go to ``benchmarks/scale.md`` between ``<!-- bigadmin:begin -->`` and
``<!-- bigadmin:end -->`` unless ``--no-write``; every captured statement of the
slowest pages and its plan go to ``var/bigadmin-sql-<db>-<name>.txt``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bigtable import LABELS, WARM_UP_ENQUEUES, url_for  # noqa: E402

PAGES = (
    "changelist",
    "status=pending",
    "dead letters",
    "job page",
    "dashboard",
    "search by id",
    "search by task",
    "search, no match",
    "date: year",
    "date: month",
    "date: day",
)


def configure(db: str, name: str) -> None:
    """The test suite's settings (admin, auth, sessions) plus the benchmark's job."""
    os.environ["DATABASE_URL"] = url_for(db, name)
    from benchmarks.run import ensure_database

    ensure_database(os.environ["DATABASE_URL"])
    from django.conf import settings

    import tests.settings as base

    values = {key: getattr(base, key) for key in dir(base) if key.isupper()}
    values["INSTALLED_APPS"] = [*base.INSTALLED_APPS, "benchmarks.benchapp"]
    values["ARCATURE"] = {}
    values["LOGGING"] = {"version": 1, "disable_existing_loggers": False}
    settings.configure(**values)
    import django

    django.setup()
    from django.core.management import call_command
    from django.db.migrations.exceptions import InconsistentMigrationHistory

    try:
        call_command("migrate", verbosity=0)
    except InconsistentMigrationHistory:
        # Some shared benchmark databases were migrated from a branch whose migrations
        # were numbered differently; the job table is there, only the admin's are missing.
        create_admin_tables()


def create_admin_tables() -> None:
    """The tables the admin pages need (users, sessions, content types), when missing."""
    from django.apps import apps
    from django.db import connection

    existing = set(connection.introspection.table_names())
    with connection.schema_editor() as editor:
        for label in ("contenttypes", "auth", "sessions", "admin"):
            for model in apps.get_app_config(label).get_models():
                if model._meta.db_table not in existing:
                    editor.create_model(model)
                    existing.add(model._meta.db_table)


class Pages:
    """One database, one size: set it up, or time its pages once (one round)."""

    def __init__(self, db: str, name: str, options: argparse.Namespace) -> None:
        from benchmarks.bigtable import Scale

        self.db, self.name, self.options = db, name, options
        self.big = name.endswith("_big")
        self.scale = Scale(db, name, options)
        self.Job = self.scale.Job

    def setup(self) -> dict[str, Any]:
        """Finished rows (built once on the big table), fresh statistics, then pending jobs."""
        from benchmarks.benchapp.jobs import noop
        from tests.plans import finished_rows_sql

        scale = self.scale
        if self.big:
            scale.build()
            scale.reset()
        else:
            scale.bench.clear()
            small: int = self.options.small_finished
            scale.sql(finished_rows_sql(scale.vendor, scale.table, 1, small + 1, small))
            self.analyse()
        noop.enqueue_many([[]] * self.options.pending)
        from django.contrib.auth.models import User

        if not User.objects.filter(username="bench").exists():
            User.objects.create_superuser("bench", "bench@example.invalid", "bench")
        return {
            "finished_rows": scale.finished_rows(),
            "pending_rows": self.Job.objects.filter(status="pending").count(),
        }

    def analyse(self) -> None:
        vendor, table = self.scale.vendor, self.scale.table
        if vendor == "postgresql":
            self.scale.sql(f"VACUUM ANALYZE {table}")
        elif vendor == "mysql":
            self.scale.sql(f"ANALYZE TABLE {table}")
        else:
            self.scale.sql("ANALYZE")

    def urls(self) -> dict[str, str]:
        from django.urls import reverse
        from django.utils import timezone

        jobs = reverse("admin:django_arcature_job_changelist")
        dead = reverse("admin:django_arcature_deadjob_changelist")
        middle = timezone.now() - timedelta(days=15)
        one = (
            self.Job.objects.filter(status="dead", finished_at__lt=middle)
            .order_by("-status", "-finished_at")
            .only("pk", "created_at")
            .first()
        )
        assert one is not None, "no dead job in the table"
        day = timezone.localtime(one.created_at)
        y, m, d = day.year, day.month, day.day
        return {
            "changelist": jobs,
            "status=pending": f"{jobs}?status__exact=pending",
            "dead letters": dead,
            "job page": reverse("admin:django_arcature_job_change", args=[one.pk]),
            "dashboard": reverse("admin:django_arcature_dashboard"),
            "search by id": f"{jobs}?q={one.pk}",
            "search by task": f"{jobs}?q=bench.noop",
            "search, no match": f"{jobs}?q=no-such-task",
            "date: year": f"{jobs}?created_at__year={y}",
            "date: month": f"{jobs}?created_at__year={y}&created_at__month={m}",
            "date: day": f"{jobs}?created_at__year={y}&created_at__month={m}&created_at__day={d}",
        }

    def admin(self) -> dict[str, Any]:
        """Every page: one warm-up fetch, then ``--requests`` timed fetches (ms)."""
        from django.contrib.auth.models import User
        from django.db import connection
        from django.test import Client
        from django.test.utils import CaptureQueriesContext

        client = Client()
        client.force_login(User.objects.get(username="bench"))
        urls = {page: url for page, url in self.urls().items() if page in pages(self.options)}
        times: dict[str, list[float]] = {}
        statements: dict[str, list[tuple[float, str]]] = {}
        for page, url in urls.items():
            with CaptureQueriesContext(connection) as captured:
                response = client.get(url)
            assert response.status_code == 200, (page, url, response.status_code)
            statements[page] = [(float(q["time"]), q["sql"]) for q in captured.captured_queries]
            times[page] = []
            for _ in range(self.options.requests):
                started = time.perf_counter()
                response = client.get(url)
                times[page].append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200, (page, url, response.status_code)
        self.write_statements(statements)
        return {"admin": times, "urls": urls}

    def write_statements(self, statements: dict[str, list[tuple[float, str]]]) -> None:
        """Each page's statements with their time in the warm-up fetch, the slowest explained."""
        from django.db import connection

        lines = []
        for page, captured in statements.items():
            lines.append(f"==== {page}: {len(captured)} statements")
            for seconds, sql in captured:
                lines.append(f"-- {seconds * 1000:.1f} ms: {sql}")
            slowest = max(captured, default=None)
            if slowest and slowest[1].lstrip().upper().startswith("SELECT"):
                prefix = "EXPLAIN QUERY PLAN " if connection.vendor == "sqlite" else "EXPLAIN "
                try:
                    with connection.cursor() as cursor:
                        cursor.execute(prefix + slowest[1])
                        plan = [" | ".join(str(c) for c in row) for row in cursor.fetchall()]
                except Exception as error:  # a plan we cannot take is reported
                    plan = [f"(no plan: {error})"]
                lines.append("plan of the slowest:")
                lines.extend("   " + line for line in plan)
        out = ROOT / "var" / f"bigadmin-sql-{self.db}-{self.name}.txt"
        out.parent.mkdir(exist_ok=True)
        out.write_text("\n".join(lines) + "\n")

    def run(self, phase: str) -> dict[str, Any]:
        if phase == "setup":
            return self.setup()
        if phase == "admin":
            return self.admin()
        if phase == "reset":
            if self.big:
                self.scale.reset()
            else:
                self.scale.bench.clear()
            return {}
        if phase == "enqueue":
            return {"enqueue_single": self.scale.enqueue_single()}
        if phase == "sweep":
            return {"sweep": self.scale.sweep()}
        raise SystemExit(f"unknown phase {phase!r}")


# --- the parent ---------------------------------------------------------------------------------


def pages(options: argparse.Namespace) -> tuple[str, ...]:
    """The pages timed: all, or all but the full-scan search (14 s a request on 10M rows)."""
    return tuple(p for p in PAGES if not (options.skip_no_match and p == "search, no match"))


def run_child(db: str, name: str, phase: str) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--one", db, name, phase, *sys.argv[1:]]
    out = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode or not lines:
        sys.stderr.write(out.stdout)
        raise SystemExit(f"{phase} on {db}/{name} failed")
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    brief = {k: v for k, v in result.items() if k not in ("admin", "urls")}
    if "admin" in result:
        brief["median_ms"] = {p: round(statistics.median(t), 1) for p, t in result["admin"].items()}
    print(f"{db}/{name} {phase}: {json.dumps(brief)}", file=sys.stderr, flush=True)
    return result


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def abba(names: dict[str, str], index: int) -> list[tuple[str, str]]:
    """The tables in round ``index``'s order: which one goes first alternates, so the
    second place's warmer (or busier) machine falls to each table as often."""
    order = list(names.items())
    return order if index % 2 == 0 else order[::-1]


def measure(db: str, options: argparse.Namespace) -> dict[str, Any]:
    names = {size: f"{options.prefix}_{size}" for size in ("small", "big")}
    found: dict[str, Any] = {"db": db, "load_before": load_average()}
    for size, name in names.items():
        found[size] = run_child(db, name, "setup")
    times: dict[str, dict[str, list[float]]] = {"small": {}, "big": {}}
    for index in range(options.rounds):
        for size, name in abba(names, index):
            result = run_child(db, name, "admin")
            found[f"{size}_urls"] = result["urls"]
            for page, samples in result["admin"].items():
                times[size].setdefault(page, []).extend(samples)
    found["admin"] = {
        page: {
            "small_ms": statistics.median(times["small"][page]),
            "big_ms": statistics.median(times["big"][page]),
        }
        for page in pages(options)
    }
    found["load_admin"] = load_average()
    rates: dict[str, dict[str, list[float]]] = {"small": {}, "big": {}}
    if not options.skip_writes:
        for name in names.values():
            run_child(db, name, "reset")
        for index in range(options.write_rounds):
            for phase, key in (("enqueue", "enqueue_single"), ("sweep", "sweep")):
                for size, name in abba(names, index):
                    rate = run_child(db, name, phase)[key]
                    rates[size].setdefault(key, []).append(rate)
    found["rates"] = rates
    found["load_after"] = load_average()
    return found


def write_results(results: list[dict[str, Any]], options: argparse.Namespace) -> None:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = "benchmarks/bigadmin.py " + " ".join(sys.argv[1:])
    parts = [
        f"Measured {stamp} on {platform.machine()} ({os.cpu_count()} cores).\n\n"
        f"```console\n$ .venv/bin/python {command}\n```\n"
    ]
    for r in results:
        small, big = r["small"], r["big"]
        label = LABELS[r["db"]]
        parts.append(
            f"**{label}**: {big['finished_rows']:,} finished rows against "
            f"{small['finished_rows']:,}, {big['pending_rows']:,} pending in both; "
            f"{options.rounds} alternating rounds of {options.requests} requests per page "
            f"(median ms). Load average before {r['load_before']}, after the pages "
            f"{r['load_admin']}, at the end {r['load_after']}.\n\n"
            "| page | small table | big table | big/small speed |\n|---|---|---|---|"
        )
        for page in pages(options):
            row = r["admin"][page]
            ratio = row["small_ms"] / row["big_ms"]
            mark = f"**{ratio:.2f}**" if ratio < 0.9 else f"{ratio:.2f}"
            parts.append(f"| {page} | {row['small_ms']:.1f} ms | {row['big_ms']:.1f} ms | {mark} |")
        parts.append("")
        rates = r["rates"]
        if rates["small"]:
            parts.append(
                f"{options.write_rounds} alternating rounds of {options.single:,} one-by-one "
                f"enqueues and of {options.sweep:,} expired leases swept; per round the rate "
                "on each table, and the ratio of the medians:\n\n"
                "| measure | small table (per round) | big table (per round) | big/small |\n"
                "|---|---|---|---|"
            )
            for key, title in (("enqueue_single", "enqueue 1-by-1"), ("sweep", "sweep")):
                s, b = rates["small"][key], rates["big"][key]
                ratio = statistics.median(b) / statistics.median(s)
                parts.append(
                    f"| {title} | {', '.join(f'{x:,.0f}' for x in s)} /s "
                    f"| {', '.join(f'{x:,.0f}' for x in b)} /s | {ratio:.2f} |"
                )
            parts.append("")
    block = "\n".join(parts)
    print(block)
    if options.no_write:
        return
    path = ROOT / "benchmarks" / "scale.md"
    text = path.read_text()
    key = ",".join(r["db"] for r in results) + ":" + options.prefix
    begin, end = f"<!-- bigadmin:{key}:begin -->", f"<!-- bigadmin:{key}:end -->"
    block = f"{begin}\n{block}\n{end}"
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
    elif "<!-- bigadmin:end -->" in text:
        marker = "<!-- bigadmin:end -->"
        text = text.replace(marker, block + "\n\n" + marker)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="postgres", help="comma-separated: postgres,mysql,sqlite")
    parser.add_argument("--prefix", default="arc_plan", help="database name prefix")
    parser.add_argument("--finished", type=int, help="finished rows, big table (bigtable.py's)")
    parser.add_argument("--small-finished", type=int, default=10_000, help="finished, small")
    parser.add_argument("--pending", type=int, default=100_000, help="pending jobs in both")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of pages")
    parser.add_argument("--requests", type=int, default=5, help="timed requests per page/round")
    parser.add_argument("--write-rounds", type=int, default=5, help="enqueue/sweep rounds")
    parser.add_argument("--single", type=int, default=500, help="one-by-one enqueues per round")
    parser.add_argument("--sweep", type=int, default=2_000, help="expired leases per round")
    parser.add_argument(
        "--warm-up", type=int, default=WARM_UP_ENQUEUES, help="untimed enqueues before --single"
    )
    parser.add_argument("--skip-writes", action="store_true", help="admin pages only")
    parser.add_argument("--skip-no-match", action="store_true", help="not the full-scan search")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    options = parser.parse_args()
    # bigtable.Scale reads these; the drain is not run here.
    options.jobs, options.procs, options.batches = 0, 1, 0
    if options.one:
        db, name, phase = options.one
        configure(db, name)
        print("RESULT " + json.dumps(Pages(db, name, options).run(phase), default=str))
        return
    results = [measure(db, options) for db in options.db.split(",")]
    write_results(results, options)


if __name__ == "__main__":
    main()
