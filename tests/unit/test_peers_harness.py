"""benchmarks/peers.py's bounds and renderings, without a database or any peer installed.

A fake queue (a folder of job files, workers that are plain Python processes running
the same stamp as every contender's handler) stands in for a real one, so the
harness's own rules are tested: a drain too slow for ``--drain-timeout`` is measured
on the jobs it ran instead of holding up the run, a polling worker gets fewer
pickup samples, a contender past ``--timeout`` is stopped and reported, and the
README's peer table is the rendering of the saved results. No figure's value is
asserted (timings stay out of the suite): only counts, bounds and text.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks import peers
from benchmarks.peerkit.harness import Harness, Peer

ROOT = Path(__file__).resolve().parent.parent.parent

#: One worker of the fake queue: claims job files (by renaming them, so two workers
#: never run the same one), stamps each and sleeps PEERS_FAKE_DELAY after it;
#: polls every PEERS_FAKE_POLL seconds when there is nothing to claim.
WORKER = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, os.environ["PEERS_ROOT"])
    from benchmarks.peerkit.stamp import stamp

    folder = os.environ["PEERS_FAKE_QUEUE"]
    delay = float(os.environ["PEERS_FAKE_DELAY"])
    poll = float(os.environ["PEERS_FAKE_POLL"])
    while True:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".job"))
        if not names:
            time.sleep(poll)
            continue
        for name in names:
            try:
                os.rename(os.path.join(folder, name), os.path.join(folder, name + ".taken"))
            except FileNotFoundError:
                continue  # the other worker took it
            stamp(int(name.split(".")[0]))
            time.sleep(delay)
    """
)


class FakeQueue(Peer):
    name = "fake"
    label = "fake queue"

    def __init__(self, folder: Path, delay: float, poll: float = 0.01) -> None:
        self.folder = folder
        self.delay = delay
        self.poll = poll
        folder.mkdir(exist_ok=True)

    def versions(self) -> dict[str, str]:
        return {"fake": "1.0"}

    def clear(self) -> None:
        for path in self.folder.iterdir():
            path.unlink()

    def enqueue_one(self, key: int) -> None:
        (self.folder / f"{key:09d}.job").touch()

    def enqueue_batch(self, keys: list[int]) -> None:
        for key in keys:
            self.enqueue_one(key)

    def worker_argv(self) -> list[str]:
        return [sys.executable, "-c", WORKER]

    def worker_env(self) -> dict[str, str]:
        return {
            "PEERS_ROOT": str(ROOT),
            "PEERS_FAKE_QUEUE": str(self.folder),
            "PEERS_FAKE_DELAY": str(self.delay),
            "PEERS_FAKE_POLL": str(self.poll),
        }


def _options(**given: Any) -> argparse.Namespace:
    options = peers.parse([])
    for key, value in given.items():
        setattr(options, key, value)
    return options


@pytest.mark.slow
def test_a_drain_past_its_timeout_is_measured_on_the_jobs_it_ran(tmp_path: Path) -> None:
    # 2 workers at 0.1 s a job run about 20 jobs a second: 200 cannot all start
    # within 2 s of the last batch, so the drain stops waiting there.
    harness = Harness(FakeQueue(tmp_path / "queue", delay=0.1), _options())
    try:
        began = time.monotonic()
        drained = harness.drain(200, 2, timeout=2.0)
        took = time.monotonic() - began
    finally:
        harness.close()
    assert 2 <= drained["done"] < 200
    assert drained["rate"] > 0
    assert drained["cpu_us"] >= 0  # per job run: ticks of 10 ms, a sleeping worker has few
    # Bounded by the timeout (plus the workers' start and stop), not by the 200 jobs.
    assert took < 60


@pytest.mark.slow
def test_a_drain_within_its_timeout_counts_every_job(tmp_path: Path) -> None:
    harness = Harness(FakeQueue(tmp_path / "queue", delay=0.0), _options())
    try:
        drained = harness.drain(50, 2, timeout=60.0)
    finally:
        harness.close()
    assert drained["done"] == 50


@pytest.mark.slow
def test_a_polling_worker_gets_the_poller_samples_and_every_one_is_taken(
    tmp_path: Path,
) -> None:
    queue = FakeQueue(tmp_path / "queue", delay=0.0, poll=0.2)
    queue.poll_interval = 0.2  # the harness spaces samples over this
    harness = Harness(queue, _options(samples=60, poller_samples=3, idle_seconds=0.1))
    assert harness.samples() == 3
    try:
        picked = harness.pickup(harness.samples())
        stamped = len(harness.reader.poll())
    finally:
        harness.close()
    assert picked["p50_ms"] is not None
    assert picked["p50_ms"] > 0
    # The probe job(s) that proved the worker ready, then exactly the 3 samples.
    assert stamped == harness.key
    assert stamped >= 3 + 1
    # A worker woken by its server keeps --samples.
    woken = Harness(FakeQueue(tmp_path / "other", delay=0.0), _options(samples=7))
    woken.close()
    assert woken.samples() == 7


def test_a_contender_past_its_timeout_is_stopped_and_reported(tmp_path: Path) -> None:
    # An "interpreter" that never finishes: the child is sent SIGTERM at the timeout.
    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\necho 'child started' >&2\nexec sleep 300\n")
    hang.chmod(0o755)
    began = time.monotonic()
    result = peers.run_contender("pgqueuer", str(hang), [], timeout=1.0)
    assert time.monotonic() - began < 30
    assert result["name"] == "pgqueuer"
    assert "did not finish in 1 s" in result["error"]
    assert "child started" in result["error"]


def test_quick_keeps_the_10000_job_runs_and_yields_to_given_options() -> None:
    quick = peers.parse(["--quick"])
    assert (quick.jobs, quick.rounds, quick.samples) == (10_000, 1, 30)
    given = peers.parse(["--quick", "--rounds=2", "--samples", "9"])
    assert (given.rounds, given.samples, given.single) == (2, 9, peers.QUICK["single"])
    full = peers.parse([])
    assert sum(peers.estimate(n, quick) for n in peers.CONTENDERS) < sum(
        peers.estimate(n, full) for n in peers.CONTENDERS
    )
    # A poller's estimate counts --poller-samples, not --samples.
    fewer = peers.parse(["--poller-samples", "5"])
    assert peers.estimate("django-tasks-db", fewer) < peers.estimate("django-tasks-db", full)
    assert peers.estimate("arcature", fewer) == peers.estimate("arcature", full)


def _record() -> dict[str, Any]:
    def result(name: str, label: str, **figures: float) -> dict[str, Any]:
        package = peers.README_LABELS[name][1] or "django-arcature"
        return {
            "name": name,
            "label": label,
            "versions": {package: "3.14.1", "PostgreSQL": "15.18 (Debian)"},
            "caveats": {"finished jobs": "deleted" if name == "pgqueuer" else "kept"},
            "idle_unit": "transactions/s",
            "drain_cpu_us": 100.0,
            "drain_timeout": 60.0,
            "samples": 60,
            **figures,
        }

    return {
        "date": "2026-12-02 17:45 to 18:08 UTC",
        "machine": "x86_64, 2 cores",
        "command": ".venv/bin/python benchmarks/peers.py",
        "loads": ["0.10 0.20 0.30", "1.00 1.10 1.20"],
        "options": {"jobs": 10_000, "single": 2_000, "samples": 60, "rounds": 3},
        "results": [
            result(
                "arcature",
                "django-arcature (ours)",
                bulk_1000=31_000.0,
                single=950.0,
                drain_2=4_400.0,
                drain_done=10_000.0,
                pickup_p50_ms=3.0,
                copy_rate=62_000.0,
                in_tx_call_p50_us=100.0,
                in_tx_call_p99_us=200.0,
                in_tx_added_p50_us=120.0,
                in_tx_added_p99_us=300.0,
            ),
            result(
                "pgqueuer",
                "pgqueuer",
                bulk_1000=30_000.0,
                single=1_800.0,
                drain_2=4_800.0,
                drain_done=10_000.0,
                pickup_p50_ms=4.0,
            ),
            result(
                "django-tasks-db",
                "django-tasks-db",
                bulk_1000=1_300.0,
                single=650.0,
                drain_2=90.0,
                drain_done=5_400.0,
                pickup_p50_ms=510.0,
            ),
            {"name": "oban", "error": "pip install oban failed"},
        ],
    }


def test_the_readme_table_is_rewritten_from_the_results_between_its_markers(
    tmp_path: Path,
) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(
        f"# title\n\nbefore\n\n{peers.README_BEGIN}\nold table\n{peers.README_END}\n\nafter\n"
    )
    peers.write_readme(readme, _record())
    text = readme.read_text()
    assert text.startswith("# title\n\nbefore\n\n" + peers.README_BEGIN)
    assert text.endswith(peers.README_END + "\n\nafter\n")
    assert "old table" not in text
    assert "| django-arcature | 31,000/s | 950/s | 4,400/s | 3.0 ms |" in text
    assert "| pgqueuer 3.14 | 30,000/s | 1,800/s | 4,800/s | 4.0 ms |" in text
    # A drain that timed out says so in the README too.
    assert "| django-tasks-db 3.14 | 1,300/s | 650/s | 90/s (5,400 of 10,000 run in time)" in text
    assert "oban" not in text.lower()  # failed: only peers.md lists it
    assert "on 2026-12-02" in text
    assert "PostgreSQL 15 " in text
    assert "0.92\N{MULTIPLICATION SIGN} as fast as pgqueuer (which deletes" in text
    assert "50% of a `COPY`" in text
    # Rewriting again from the same results changes nothing.
    peers.write_readme(readme, _record())
    assert readme.read_text() == text


def test_a_readme_without_the_markers_is_refused(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# no table here\n")
    with pytest.raises(SystemExit):
        peers.write_readme(readme, _record())
    assert readme.read_text() == "# no table here\n"


def test_a_timed_out_drain_is_said_in_peers_md() -> None:
    text = peers.report(_record())
    assert "90/s (5,400 of 10,000 run in time)" in text
    assert "(`--drain-timeout`)" in text
    full = copy.deepcopy(_record())
    full["results"][2]["drain_done"] = 10_000.0
    assert "run in time" not in peers.report(full)


def test_each_goal_stands_beside_its_physical_limit_and_one_the_limit_misses_is_out_of_reach() -> (
    None
):
    record = copy.deepcopy(_record())
    ours = record["results"][0]
    ours.update(
        floor_pickup_ms=2.0,
        floor_pickup_commit_ms=1.2,
        floor_pickup_delivery_ms=0.1,
        floor_pickup_claim_ms=0.5,
        floor_single=2_000.0,  # 1.11x pgqueuer's 1,800/s: 1.25x is out of reach
        floor_single_any=2_400.0,
        floor_in_tx_added_p50_us=90.0,  # the INSERT alone would meet 150 µs
    )
    rows = {
        line.split(" | ")[0].lstrip("| "): line for line in peers.goals(ours, record["results"])
    }
    pickup = rows["idle pickup p50 <= 1.5 ms"]
    assert "2.00 ms (commit 1.20, delivery 0.10, claim 0.50); ours 1.0 ms above it" in pickup
    assert pickup.endswith("| no: out of reach (the limit misses it too) |")
    single = rows["one-by-one enqueue >= 1.25x the fastest PostgreSQL peer"]
    assert "our row, bare INSERT 2,000/s: 1.11x" in single
    assert single.endswith("| no: out of reach (the limit misses it too) |")
    # COPY at 62,000/s is 2.07x pgqueuer's bulk: reachable, so a plain "no".
    bulk = rows["bulk enqueue >= 1.5x the fastest PostgreSQL peer"]
    assert "`COPY` of the same rows 62,000/s: 2.07x" in bulk
    assert bulk.endswith("| no |")
    assert rows["in-transaction enqueue p50 <= 150 µs"].endswith(
        "| our row's bare INSERT adds 90 µs | yes |"
    )
    # A run without the limits (an older peers.json) still renders, with a dash.
    bare = peers.goals(_record()["results"][0], _record()["results"])
    assert any(line.endswith("| 3.0 ms | — | no |") for line in bare)


def test_the_repository_readme_shows_the_saved_run() -> None:
    """README.md's peer table is the rendering of benchmarks/peers.json, so its
    figures are those of the run on benchmarks/peers.md (rewrite it with
    ``benchmarks/peers.py --render benchmarks/peers.json --readme``)."""
    record = json.loads((ROOT / "benchmarks" / "peers.json").read_text())
    text = (ROOT / "README.md").read_text()
    assert peers.readme_table(record) in text
    assert os.path.exists(ROOT / "benchmarks" / "peers.md")


def _fake_apt(folder: Path, lists_empty: bool) -> Path:
    """A stand-in ``apt-get`` (and ``sudo``) on PATH: each call is logged; with empty
    package lists ``install`` fails until ``update`` ran, as on a fresh machine."""
    log = folder / "calls"
    (folder / "apt-get").write_text(
        textwrap.dedent(
            f"""\
            #!/bin/sh
            echo "$*" >> {log}
            case "$*" in
              update*) : > {folder}/updated; exit 0 ;;
            esac
            if [ {int(lists_empty)} = 1 ] && [ ! -e {folder}/updated ]; then
              echo "E: Unable to locate package redis-server" >&2; exit 100
            fi
            printf '#!/bin/sh\\n' > {folder}/redis-server
            /bin/chmod 755 {folder}/redis-server
            """
        )
    )
    (folder / "sudo").write_text('#!/bin/sh\n[ "$1" = -n ] && shift\nexec "$@"\n')
    for name in ("apt-get", "sudo"):
        (folder / name).chmod(0o755)
    return log


def test_redis_server_is_installed_after_an_update_on_a_fresh_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _fake_apt(tmp_path, lists_empty=True)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert peers.ensure_redis_server() is None
    calls = log.read_text().splitlines()
    assert [call.split()[0] for call in calls] == ["install", "update", "install"]
    assert (tmp_path / "redis-server").exists()
    # Once there, nothing more is installed.
    assert peers.ensure_redis_server() is None
    assert len(log.read_text().splitlines()) == 3


def test_a_redis_server_that_cannot_be_installed_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_apt(tmp_path, lists_empty=True)
    (tmp_path / "apt-get").write_text("#!/bin/sh\necho 'E: no network' >&2\nexit 100\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    why = peers.ensure_redis_server()
    assert why is not None
    assert "E: no network" in why
