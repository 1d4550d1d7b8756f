"""``benchmarks/workflows.py`` at a tiny scale, so the script the lead reruns cannot rot.

It runs end to end on the database under test's server (its own database, named
after ``ARCATURE_DB_NAME``): two real worker processes, the plain drain, the
1 → 20 → 1 workflow, the batch with its callback, the lock sampler and the
``wait()`` latencies. The script itself refuses a drain in which any job did not
succeed; here only the shape of its report is checked, never a speed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

VENDOR_TO_DB = {"sqlite": "sqlite", "postgresql": "postgres", "mysql": "mysql"}


def run_benchmark(tmp_path: Path, *options: str) -> tuple[str, dict[str, Any], str]:
    """``benchmarks/workflows.py`` at a tiny scale on this test's database, with
    ``options``; (the benchmark's name for the database, its JSON result, its log)."""
    db = VENDOR_TO_DB[connection.vendor]
    name = (os.environ.get("ARCATURE_DB_NAME") or "arcature") + "_wfbench_ci"
    argv = [sys.executable, str(ROOT / "benchmarks" / "workflows.py"), "--db", db]
    argv += ["--db-name", name, "--nodes", "20", *options]
    argv += ["--out", str(tmp_path / "workflows.md")]
    if db == "sqlite":
        argv += ["--url", f"sqlite:///{tmp_path / 'bench.sqlite3'}"]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("{")))
    return db, result, out.stderr


@pytest.mark.pgbouncer(False, reason="the benchmark connects to the servers directly")
def test_the_workflow_benchmark_runs_at_a_tiny_scale(tmp_path: Path) -> None:
    db, result, _ = run_benchmark(tmp_path, "--repeat", "1", "--wait-samples", "3")
    (round_,) = result["rounds"]
    assert round_["plain"]["jobs"] == round_["fanout"]["jobs"] == 22
    assert round_["batch"]["jobs"] == 21
    assert result["fanout_ratio"] > 0
    assert result["batch_ratio"] > 0
    assert result["wait_samples"] == 3
    if db in ("postgres", "mysql"):
        assert round_["fanout"]["sampler_error"] == ""
        assert round_["fanout"]["lock_samples"] > 0
    written = (tmp_path / "workflows.md").read_text()
    assert "<!-- workflows:begin -->" in written
    assert "fan-out/fan-in" in written


@pytest.mark.pgbouncer(False, reason="the benchmark connects to the servers directly")
def test_a_subset_with_the_plain_drain_reports_its_ratio(tmp_path: Path) -> None:
    """``--kinds plain,fanout`` (the A/B runs of the fan-in) gives each round's ratio
    to the same round's plain drain, and renders nothing."""
    _, result, log = run_benchmark(tmp_path, "--repeat", "2", "--kinds", "plain,fanout")
    assert len(result["rounds"]) == 2
    for found in result["rounds"]:
        assert set(found["order"]) == {"plain", "fanout"}
        assert found["fanout_ratio"] == found["fanout"]["rate"] / found["plain"]["rate"]
        assert "batch_ratio" not in found
    assert "round 1 fanout ratio: " in log
    assert not (tmp_path / "workflows.md").exists()
