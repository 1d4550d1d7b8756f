"""benchmarks/peers.py keeps working: a tiny run of ours end to end, and a peer that
cannot run is reported as such while the others still run.

The CI profile: no network, no peer installed (``--skip-install``), 1,000 jobs (the
smallest bulk batch) and a handful of samples; the figures' values are never
asserted (timings stay out of the suite), only that each was measured and written.
Marked heavy (tens of seconds of real workers): the newest environment runs it.
The full comparison is run by hand (the command is in benchmarks/peers.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.peerkit.stamp import StampReader

ROOT = Path(__file__).resolve().parent.parent.parent
TINY = [
    "--jobs",
    "1000",
    "--single",
    "20",
    "--samples",
    "3",
    "--rounds",
    "1",
    "--idle-seconds",
    "0.5",
    "--tx-pairs",
    "30",
]


def _run(tmp_path: Path, *argv: str) -> tuple[subprocess.CompletedProcess[str], str]:
    out = tmp_path / "peers.md"
    env = {
        **os.environ,
        "PEERS_DB_PREFIX": os.environ.get("ARCATURE_DB_NAME", "arcature") + "_peers",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "peers.py"), *argv, "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done, out.read_text()


def _results(done: subprocess.CompletedProcess[str]) -> dict[str, dict[str, object]]:
    results = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            result = json.loads(line)
            results[result["name"]] = result
    return results


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.pgbouncer(False, reason="peers.py connects to PostgreSQL directly")
@pytest.mark.only_on("postgresql", reason="benchmarks/peers.py measures on PostgreSQL")
def test_ours_alone_measures_every_figure_and_writes_the_report(tmp_path: Path) -> None:
    done, report = _run(tmp_path, "--peers", "arcature", "--skip-install", *TINY)
    ours = _results(done)["arcature"]
    assert "error" not in ours, ours
    for figure in (
        "bulk_1000",
        "single",
        "drain_2",
        "drain_cpu_us",
        "pickup_p50_ms",
        "pickup_p95_ms",
        "copy_rate",
        "in_tx_call_p50_us",
        "in_tx_added_p99_us",
        "floor_single",
        "floor_single_any",
        "floor_in_tx_added_p50_us",
        "floor_pickup_ms",
        "floor_pickup_claim_ms",
    ):
        value = ours[figure]
        assert isinstance(value, float), (figure, ours)
        assert value > 0, (figure, ours)
    assert "| django-arcature (ours) |" in report
    assert "physical limit" in report
    assert "benchmarks/peers.py --peers arcature --skip-install" in report
    assert "load average before" in report
    assert "did not run" not in report
    assert "## Goals" in report
    assert "physical limit on this machine, this run" in report
    assert "INSERT + NOTIFY, LISTEN, one-statement claim:" in report
    # The raw results are kept beside it, and render to the same page.
    again = tmp_path / "again.md"
    render = ["--render", str(tmp_path / "peers.json"), "--out", str(again)]
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "peers.py"), *render],
        cwd=ROOT,
        check=True,
    )
    assert again.read_text() == report


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.pgbouncer(False, reason="peers.py connects to PostgreSQL directly")
@pytest.mark.only_on("postgresql", reason="benchmarks/peers.py measures on PostgreSQL")
def test_a_peer_that_cannot_run_is_reported_and_ours_still_runs(tmp_path: Path) -> None:
    done, report = _run(
        tmp_path,
        "--peers",
        "pgqueuer,arcature",
        "--skip-install",
        "--peers-python",
        str(tmp_path / "no-such-python"),
        *TINY,
    )
    results = _results(done)
    assert "no-such-python" in str(results["pgqueuer"]["error"])
    assert "error" not in results["arcature"]
    assert "## Contenders that did not run" in report
    assert "**pgqueuer**" in report
    assert "| django-arcature (ours) |" in report


def test_stamp_reader_keeps_a_half_written_line_for_the_next_poll(tmp_path: Path) -> None:
    path = tmp_path / "4242.stamps"
    path.write_bytes(b"1 100.5\n2 10")
    reader = StampReader(tmp_path)
    assert reader.poll() == {1: (100.5, 4242)}
    with open(path, "ab") as handle:
        handle.write(b"1.25\n3 102.0\n")
    assert reader.poll() == {1: (100.5, 4242), 2: (101.25, 4242), 3: (102.0, 4242)}
