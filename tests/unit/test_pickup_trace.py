"""The worker's pickup trace and the benchmark's break-down of it (no database needed)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from django_arcature.bench.measure import PICKUP_STEPS, EnqueueStamps, pickup_breakdown
from django_arcature.worker.pickup_trace import ENV, HINT, LISTEN, POLL, PickupTrace


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_off_unless_the_environment_names_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert PickupTrace.from_environment() is None
    monkeypatch.setenv(ENV, "")
    assert PickupTrace.from_environment() is None


def test_an_unopenable_file_turns_it_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENV, str(tmp_path / "missing" / "trace.jsonl"))
    assert PickupTrace.from_environment() is None


def test_a_woken_claim_stamps_each_step_in_order(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    trace = PickupTrace(str(path))
    trace.woke(LISTEN)
    trace.woke(HINT)  # a second wake-up for the same claim: the first one counts
    trace.taken()
    trace.claim_sent()
    stamps = trace.claimed(2)
    assert stamps is not None
    job = uuid.uuid4()
    trace.started(job, stamps)
    trace.close()
    [line] = _lines(path)
    assert line["job"] == str(job)
    assert line["source"] == LISTEN
    assert line["batch"] == 2
    order = ["woke_ns", "taken_ns", "claim_sent_ns", "claim_back_ns", "handler_ns"]
    moments = [line[key] for key in order]
    assert all(isinstance(moment, int) and moment > 0 for moment in moments)
    assert moments == sorted(moments)


def test_a_wake_up_during_a_claim_belongs_to_the_next_claim(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    trace = PickupTrace(str(path))
    trace.woke(HINT)
    trace.claim_sent()
    trace.woke(LISTEN)  # its job committed too late for the claim on its way
    assert trace.claimed(0) is None  # that claim found nothing
    trace.waiting()
    trace.taken()
    trace.claim_sent()
    stamps = trace.claimed(1)
    assert stamps is not None
    assert stamps["source"] == LISTEN
    empty = _lines(path)[0]
    assert empty["batch"] == 0
    assert "job" not in empty
    assert empty["source"] == HINT
    # Sent, back, then the loop waited: the window in which the next wake-up came.
    assert empty["claim_sent_ns"] <= empty["claim_back_ns"] <= empty["busy_until_ns"]
    assert empty["claim_sent_ns"] < int(stamps["woke_ns"]) < empty["busy_until_ns"]
    trace.close()


def test_a_claim_without_a_wake_up_is_a_poll(tmp_path: Path) -> None:
    trace = PickupTrace(str(tmp_path / "trace.jsonl"))
    trace.claim_sent()
    stamps = trace.claimed(1)
    assert stamps is not None
    assert stamps["source"] == POLL
    # No wake-up: the steps before the claim take no time.
    assert stamps["woke_ns"] == stamps["taken_ns"] == stamps["claim_sent_ns"]
    trace.close()


def test_a_failed_write_turns_it_off_without_raising(tmp_path: Path) -> None:
    trace = PickupTrace(str(tmp_path / "trace.jsonl"))
    trace.claim_sent()
    stamps = trace.claimed(1)
    assert trace._out is not None
    trace._out.close()
    trace._out = open("/dev/full", "w")  # noqa: SIM115 - writes fail with ENOSPC
    trace.started(uuid.uuid4(), stamps)
    assert trace._out is None
    trace.started(uuid.uuid4(), stamps)  # off: nothing happens
    trace.close()


def _sample(pk: str, base: int) -> EnqueueStamps:
    return EnqueueStamps(pk, base, base + 100, base + 1_100, base + 1_300)


def test_the_break_down_is_the_median_of_each_step() -> None:
    enqueued = [_sample("a", 1_000_000), _sample("b", 2_000_000), _sample("c", 3_000_000)]
    traced = {}
    for sample, extra in zip(enqueued, (0, 1_000, 2_000), strict=True):
        woke = sample.committed_ns + 50
        traced[sample.pk] = {
            "job": sample.pk,
            "source": HINT,
            "woke_ns": woke,
            "taken_ns": woke + 20,
            "claim_sent_ns": woke + 50,
            "claim_back_ns": woke + 450 + extra,
            "handler_ns": woke + 500 + extra,
        }
    started = {sample.pk: traced[sample.pk]["claim_sent_ns"] + 100 for sample in enqueued}
    result = pickup_breakdown(enqueued, traced, started)
    assert result["woken"] == {HINT: 3}
    assert list(result["steps_p50_ms"]) == [name for name, _, _ in PICKUP_STEPS]
    assert result["steps_p50_ms"]["enqueue_python"] == pytest.approx(0.0001)
    assert result["steps_p50_ms"]["enqueue_commit"] == pytest.approx(0.001)
    assert result["steps_p50_ms"]["claim_round_trip"] == pytest.approx(0.0014)
    assert result["claim_started_db_p50_ms"] == pytest.approx(0.0001)
    # Call to handler: the sum of the steps, sample by sample.
    assert result["handler_p50_ms"] == pytest.approx((1_100 + 500 + 1_000 + 50) / 1e6)


def test_polled_samples_count_for_the_total_only() -> None:
    sample = _sample("a", 1_000)
    traced = {
        "a": {
            "job": "a",
            "source": POLL,
            "woke_ns": 5_000,
            "taken_ns": 5_000,
            "claim_sent_ns": 5_000,
            "claim_back_ns": 6_000,
            "handler_ns": 7_000,
        }
    }
    result = pickup_breakdown([sample], traced, {})
    assert result["woken"] == {POLL: 1}
    assert result["steps_p50_ms"] == {}
    assert result["handler_p50_ms"] == pytest.approx(0.006)


def test_nothing_traced_gives_no_break_down() -> None:
    assert pickup_breakdown([_sample("a", 1_000)], {}, {}) == {}
