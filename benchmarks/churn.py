"""HOT updates and bloat of the PostgreSQL job table after churning many jobs, before/after 0008.

    .venv/bin/python benchmarks/churn.py --jobs 1000000

Two databases, ``arc_churn_before`` (migrated up to 0007) and ``arc_churn_after`` (with
0008_postgresql_storage), each rebuilt from nothing by this run and given the same
history of ``--history`` finished rows (built in SQL, then ``VACUUM ANALYZE``). Then
the same churn on each, in alternating rounds (one child process per side and
round, so a change of load hits both sides):

* per step, ``--batch`` jobs are enqueued (``enqueue_many``), a batch is claimed
  (``claim``) and joins a window of ``--window`` batches in flight; the oldest batch
  leaves the window with one batched completion (``complete_batch``), as a worker
  completes what its threads finished; so ``batch x window`` jobs are running;
* while in flight each job is heartbeaten 1, 2 or 3 times (seeded, the same on both
  sides), one ``heartbeat_many`` per step for every claim due then, as a worker
  extends all its leases at once;
* every ``--prune-every`` steps, the finished jobs of this run older than
  ``--prune-seconds`` are deleted with the filter of the manager's ``prune`` (the
  history stays), and ``sweep_expired_leases`` runs (it finds nothing).

Each claim, heartbeat and completion runs in a transaction that reads its own
``pg_stat_get_xact_tuples_updated``/``…_hot_updated`` before committing: the HOT
share per kind of update is counted exactly. The report per side:
``pg_stat_user_tables`` (updates, HOT updates, dead rows, autovacuum and autoanalyze
runs), ``pgstattuple`` of the table and ``pgstatindex`` of each index (as the
``postgres`` superuser: ``CREATE EXTENSION pgstattuple`` in these two databases only),
and the sweep's plan with ``batch x window`` running jobs. Results go to
``benchmarks/scale.md`` between the ``bloat:churn`` markers unless ``--no-write``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SERVER = "postgres://arcature:arcature@127.0.0.1:5432/"
TABLE = "django_arcature_job"
BEFORE_MIGRATION = "0007_schedules_and_queues"
SIDES = ("before", "after")
#: The generated table's markers, inside the section ``<!-- bloat:begin -->``/``end``.
BEGIN, END = "<!-- bloat:churn:begin -->", "<!-- bloat:churn:end -->"


def database(options: argparse.Namespace, side: str) -> str:
    return f"{options.prefix}_{side}"


# --- in a child process: one side, one phase ---------------------------------------------------


def child(side: str, phase: str, options: argparse.Namespace, round_no: int) -> dict[str, Any]:
    os.environ["DATABASE_URL"] = SERVER + database(options, side)
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    import django

    django.setup()
    churn = Churn(side, options)
    if phase == "setup":
        return churn.setup()
    if phase == "churn":
        return churn.churn(round_no)
    if phase == "report":
        return churn.report()
    raise SystemExit(f"unknown phase {phase!r}")


class Churn:
    def __init__(self, side: str, options: argparse.Namespace) -> None:
        from django.db import connection

        from django_arcature.models import Job

        self.side, self.options = side, options
        self.name = database(options, side)
        self.Job = Job
        self.connection = connection

    def sql(self, statement: str, params: Any = None) -> list[Any]:
        with self.connection.cursor() as cursor:
            cursor.execute(statement, params)
            return list(cursor.fetchall()) if cursor.description else []

    def log(self, message: str) -> None:
        print(f"[{self.side}] {message}", file=sys.stderr, flush=True)

    def setup(self) -> dict[str, Any]:
        from django.core.management import call_command
        from django.db import transaction

        from tests.plans import finished_rows_sql

        if self.side == "before":
            call_command("migrate", "django_arcature", BEFORE_MIGRATION, verbosity=0)
        else:
            call_command("migrate", verbosity=0)
            if self.options.fillfactor:  # a trial of another fillfactor than 0008's
                self.sql(f'ALTER TABLE "{TABLE}" SET (fillfactor = {self.options.fillfactor})')
        total = self.options.history
        chunk = 500_000
        for start in range(1, total + 1, chunk):
            stop = min(start + chunk, total + 1)
            with transaction.atomic():
                self.sql(finished_rows_sql("postgresql", f'"{TABLE}"', start, stop, total))
        self.sql(f'VACUUM ANALYZE "{TABLE}"')
        options = self.sql("SELECT reloptions FROM pg_class WHERE relname = %s", [TABLE])[0][0]
        migrations = self.sql(
            "SELECT name FROM django_migrations WHERE app = 'django_arcature' ORDER BY id"
        )
        self.log(f"built, {total:,} finished rows, options {options}")
        return {
            "reloptions": options or [],
            "last_migration": migrations[-1][0],
            "sweep_index": self.index_definitions().get("arcature_sweep_idx", ""),
        }

    def index_definitions(self) -> dict[str, str]:
        rows = self.sql("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [TABLE])
        return dict(rows)

    def counted(self, action: Any) -> tuple[Any, int, int]:
        """Run ``action`` in a transaction; the rows it updated, and how many of them HOT.

        PostgreSQL 15's ``pg_stat_get_xact_*`` also hold what earlier transactions of
        this connection counted and have not yet reported: read before and after.
        """
        from django.db import transaction

        query = (
            "SELECT pg_stat_get_xact_tuples_updated(%s::regclass), "
            "pg_stat_get_xact_tuples_hot_updated(%s::regclass)"
        )
        with transaction.atomic():
            updated_before, hot_before = self.sql(query, [TABLE, TABLE])[0]
            result = action()
            updated, hot = self.sql(query, [TABLE, TABLE])[0]
        return result, int(updated - updated_before), int(hot - hot_before)

    def churn(self, round_no: int) -> dict[str, Any]:
        from benchmarks.benchapp.jobs import noop
        from django_arcature.managers import Completion

        options = self.options
        manager = self.Job.objects
        batch, window = options.batch, options.window
        rng = random.Random(options.seed * 1000 + round_no)
        steps = -(-options.jobs // options.rounds // batch)
        # Per kind: statements, rows updated, of which HOT.
        counts = {kind: [0, 0, 0] for kind in ("claim", "heartbeat", "complete")}
        # (step claimed, claims, the ages in steps at which each claim is heartbeaten)
        in_flight: deque[tuple[int, list[Any], list[set[int]]]] = deque()
        self.complete_orphans()
        finished: deque[Any] = deque(self.finished_ids())

        def count(kind: str, action: Any) -> Any:
            result, updated, hot = self.counted(action)
            counts[kind][0] += 1
            counts[kind][1] += updated
            counts[kind][2] += hot
            return result

        def complete(claimed: list[Any]) -> None:
            log = [{"worker": "churn", "error": None}]
            done = [Completion(c.id, c.claim_token, "succeeded", attempt_log=log) for c in claimed]
            count("complete", lambda: manager.complete_batch(done))
            finished.extend(c.id for c in claimed)

        started = time.perf_counter()
        for step in range(steps):
            if in_flight and step - in_flight[0][0] >= window:
                complete(in_flight.popleft()[1])
            noop.enqueue_many([[]] * batch)
            claimed = count("claim", lambda: manager.claim("churn", 300, batch))
            beats = [set(rng.sample(range(1, window), rng.randint(1, 3))) for _ in claimed]
            in_flight.append((step, claimed, beats))
            due = [
                (c.id, c.claim_token)
                for since, held, ages in in_flight
                for c, when in zip(held, ages, strict=True)
                if step - since in when
            ]
            if due:
                lost = count("heartbeat", lambda due=due: manager.heartbeat_many(due, 300))
                assert not lost, lost
            if options.prune_every and step % options.prune_every == options.prune_every - 1:
                # What prune deletes: this run's oldest finished jobs beyond the newest
                # --keep (by id, so both sides delete the same; the history stays).
                old = [finished.popleft() for _ in range(len(finished) - options.keep)]
                if old:
                    self.Job.objects.filter(id__in=old).delete()
                manager.sweep_expired_leases()
        if round_no < options.rounds - 1:
            while in_flight:
                complete(in_flight.popleft()[1])
        # The last round leaves its window running: the report explains the sweep with it.
        seconds = time.perf_counter() - started
        self.log(f"round {round_no}: {steps * batch:,} jobs in {seconds:.0f} s")
        return {"jobs": steps * batch, "seconds": seconds, "counts": counts}

    def complete_orphans(self) -> None:
        """Complete what a round cut short left running (its connection was terminated)."""
        from django_arcature.managers import Completion

        orphans = self.Job.objects.filter(status="running", locked_by="churn")
        done = [
            Completion(job_id, token, "succeeded")
            for job_id, token in orphans.values_list("id", "claim_token")
            if token is not None  # always set while running (a check constraint says so)
        ]
        if done:
            self.Job.objects.complete_batch(done)
            self.log(f"completed {len(done):,} jobs a terminated round left running")

    def finished_ids(self) -> list[Any]:
        """This run's finished jobs from earlier rounds, oldest first."""
        return list(
            self.Job.objects.filter(status="succeeded", locked_by="churn")
            .order_by("finished_at", "id")
            .values_list("id", flat=True)
        )

    def sweep_plan(self) -> dict[str, Any]:
        """The sweep's SELECT, explained and run, with the last round's jobs still running."""
        from django_arcature.db import DatabaseNow

        query = (
            self.Job.objects.filter(status="running", lease_expires_at__lt=DatabaseNow())
            .order_by("lease_expires_at")
            .values_list("id", flat=True)[:500]
        )
        sql, params = query.query.sql_with_params()
        runs = []
        for _ in range(2):  # the first one also meets the index entries of finished jobs
            rows = self.sql("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
            plan = rows[0][0] if not isinstance(rows[0][0], str) else json.loads(rows[0][0])
            top = plan[0]["Plan"]
            blocks = top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
            runs.append({"ms": plan[0]["Execution Time"], "buffers": blocks})
        text = self.sql("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) " + sql, params)
        return {
            "running": self.Job.objects.filter(status="running").count(),
            "runs": runs,
            "text": "\n".join(line for (line,) in text),
        }

    def report(self) -> dict[str, Any]:
        stats_sql = (
            "SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, n_live_tup, n_dead_tup, "
            "autovacuum_count, autoanalyze_count FROM pg_stat_user_tables WHERE relname = %s"
        )
        keys = ("ins", "upd", "hot_upd", "del", "live", "dead", "autovacuum", "autoanalyze")
        stats = dict(zip(keys, self.sql(stats_sql, [TABLE])[0], strict=True))
        table = superuser_json(self.name, f"SELECT row_to_json(t) FROM pgstattuple('{TABLE}') t")
        indexes = {}
        for name in sorted(self.index_definitions()):
            indexes[name] = superuser_json(
                self.name, f"SELECT row_to_json(t) FROM pgstatindex('{name}') t"
            )
        return {
            "stats": stats,
            "table": table,
            "indexes": indexes,
            "definitions": self.index_definitions(),
            "sweep": self.sweep_plan(),
            "total_bytes": self.sql("SELECT pg_total_relation_size(%s::regclass)", [TABLE])[0][0],
        }


def superuser_json(name: str, query: str) -> Any:
    """One JSON row from ``psql`` as the ``postgres`` superuser (pgstattuple needs it)."""
    out = subprocess.run(
        ["su", "postgres", "-c", f'psql -XAtq -d {name} -c "{query}"'],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


# --- the parent: both databases, alternating rounds, the table ----------------------------------


def run_child(side: str, phase: str, round_no: int = 0, tries: int = 3) -> dict[str, Any]:
    """One phase in a child process; a churn round whose connection was cut is run again
    (the machine is shared, and other suites terminate backends)."""
    argv = [sys.executable, __file__, "--one", side, phase, str(round_no), *sys.argv[1:]]
    for attempt in range(1, tries + 1):
        out = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False)
        lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
        if not out.returncode and lines:
            result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
            result["attempts"] = attempt
            return result
        sys.stderr.write(out.stdout)
        print(f"churn {phase} on {side} failed (attempt {attempt})", file=sys.stderr)
    raise SystemExit(f"churn {phase} on {side} failed {tries} times")


def recreate(name: str) -> None:
    """A fresh database for one side, with pgstattuple (created by the superuser)."""
    import psycopg

    with psycopg.connect(
        "host=127.0.0.1 user=arcature password=arcature dbname=postgres", autocommit=True
    ) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    subprocess.run(
        ["su", "postgres", "-c", f"psql -XAtq -d {name} -c 'CREATE EXTENSION pgstattuple'"],
        check=True,
    )


def mib(pages_or_bytes: float) -> str:
    return f"{pages_or_bytes / 1048576:,.1f} MiB"


def pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def render(options: argparse.Namespace, found: dict[str, dict[str, Any]], load: str) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    before, after = found["before"], found["after"]

    def row(label: str, value: Any) -> str:
        return f"| {label} | {value(before)} | {value(after)} |"

    def kind(name: str) -> Any:
        return lambda r: (
            f"{r['counts'][name][2]:,} of {r['counts'][name][1]:,} "
            f"({pct(r['counts'][name][2], r['counts'][name][1])})"
        )

    def total_hot(r: dict[str, Any]) -> str:
        s = r["report"]["stats"]
        return f"{s['hot_upd']:,} of {s['upd']:,} ({pct(s['hot_upd'], s['upd'])})"

    def table(key: str, fmt: Any) -> Any:
        return lambda r: fmt(r["report"]["table"][key])

    lines = [
        "| | before (up to 0007) | after (0008) |",
        "|---|---|---|",
        row("table options", lambda r: ", ".join(r["setup"]["reloptions"]) or "(defaults)"),
        row(
            "sweep index",
            lambda r: "`" + r["setup"]["sweep_index"].split(" USING btree ")[-1] + "`",
        ),
        row(
            "churn time",
            lambda r: f"{r['seconds']:,.0f} s ({r['jobs'] / r['seconds']:,.0f} jobs/s)",
        ),
        row("claims: HOT rows", kind("claim")),
        row("heartbeats: HOT rows", kind("heartbeat")),
        row("completions: HOT rows", kind("complete")),
        row("all updates (pg_stat_user_tables)", total_hot),
        row("dead rows now (n_dead_tup)", lambda r: f"{r['report']['stats']['dead']:,}"),
        row(
            "autovacuum / autoanalyze runs",
            lambda r: (
                f"{r['report']['stats']['autovacuum']} / {r['report']['stats']['autoanalyze']}"
            ),
        ),
        row("table size (pgstattuple table_len)", table("table_len", mib)),
        row("live tuples (tuple_percent)", table("tuple_percent", lambda v: f"{v:.1f}%")),
        row("dead tuples (dead_tuple_percent)", table("dead_tuple_percent", lambda v: f"{v:.1f}%")),
        row("free space (free_percent)", table("free_percent", lambda v: f"{v:.1f}%")),
        row("table + indexes", lambda r: mib(r["report"]["total_bytes"])),
    ]
    names = sorted(set(before["report"]["indexes"]) | set(after["report"]["indexes"]))
    for name in names:

        def index(r: dict[str, Any], name: str = name) -> str:
            i = r["report"]["indexes"].get(name)
            if not i:
                return "-"
            return f"{mib(i['index_size'])}, leaf density {i['avg_leaf_density']:.0f}%"

        lines.append(row(f"`{name}`", index))
    lines.append(
        row(
            "sweep SELECT, first / next (EXPLAIN ANALYZE)",
            lambda r: (
                " / ".join(
                    f"{run['ms']:.2f} ms, {run['buffers']:,} buffers"
                    for run in r["report"]["sweep"]["runs"]
                )
                + f" ({r['report']['sweep']['running']:,} running)"
            ),
        )
    )
    command = "benchmarks/churn.py " + " ".join(sys.argv[1:])
    plans = "\n\n".join(f"{side}:\n{found[side]['report']['sweep']['text']}" for side in SIDES)
    return (
        f"Measured {stamp} on {platform.machine()} ({os.cpu_count()} cores), PostgreSQL 15; "
        f"load average before the run: {load}, after: "
        f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])}. "
        f"{options.jobs:,} jobs per side on top of {options.history:,} finished rows, "
        f"in {options.rounds} alternating rounds; claim batch {options.batch}, "
        f"{options.window} batches in flight ({options.batch * options.window:,} running), "
        f"1-3 heartbeats per job; every {options.prune_every} steps the run's finished jobs "
        f"beyond the newest {options.keep:,} are pruned. Rounds run again after another "
        f"suite terminated the connection: {before['retried']} before, {after['retried']} "
        "after (the cut round's jobs stay in the table's history).\n\n"
        f"```console\n$ .venv/bin/python {command}\n```\n\n"
        + "\n".join(lines)
        + f"\n\nThe sweep's plan at the end (last round's jobs still running):\n\n"
        f"```text\n{plans}\n```\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000, help="jobs churned per side")
    parser.add_argument("--history", type=int, default=1_000_000, help="finished rows first")
    parser.add_argument("--batch", type=int, default=50, help="claim/completion batch")
    parser.add_argument("--window", type=int, default=20, help="batches in flight")
    parser.add_argument("--rounds", type=int, default=10, help="alternating rounds")
    parser.add_argument("--prune-every", type=int, default=200, help="steps between prunes")
    parser.add_argument("--keep", type=int, default=100_000, help="finished jobs prune keeps")
    parser.add_argument("--fillfactor", type=int, help="after: this fillfactor, not 0008's")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--prefix", default="arc_churn", help="database name prefix")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.one:
        side, phase, round_no = options.one
        result = child(side, phase, options, int(round_no))
        print("RESULT " + json.dumps(result, default=str), flush=True)
        return
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    found: dict[str, dict[str, Any]] = {}
    for side in SIDES:
        recreate(database(options, side))
        setup = run_child(side, "setup", tries=1)  # a second try would add a second history
        found[side] = {"setup": setup, "jobs": 0, "seconds": 0.0, "retried": 0}
        found[side]["counts"] = {k: [0, 0, 0] for k in ("claim", "heartbeat", "complete")}
    for round_no in range(options.rounds):
        # Alternate which side goes first, so a change of load hits both alike.
        for side in SIDES if round_no % 2 == 0 else SIDES[::-1]:
            result = run_child(side, "churn", round_no)
            found[side]["jobs"] += result["jobs"]
            found[side]["seconds"] += result["seconds"]
            found[side]["retried"] += result["attempts"] - 1
            for k, values in result["counts"].items():
                found[side]["counts"][k] = [
                    a + b for a, b in zip(found[side]["counts"][k], values, strict=True)
                ]
            print(f"[{side}] round {round_no}: {json.dumps(result)}", file=sys.stderr)
    time.sleep(2)  # the children's statistics reach pg_stat_user_tables
    for side in SIDES:
        found[side]["report"] = run_child(side, "report")
    (ROOT / "var").mkdir(exist_ok=True)
    (ROOT / "var" / "churn.json").write_text(json.dumps(found, indent=1, default=str))
    block = render(options, found, load)
    print(block)
    if options.no_write:
        return
    path = ROOT / "benchmarks" / "scale.md"
    text = path.read_text()
    block = f"{BEGIN}\n{block}{END}"
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
