"""Job ids are time-ordered UUIDs (version 7): unique, unguessable, and new ones sort last.

Random (version 4) ids put each new row on a random leaf of the primary-key index;
on a table of a million rows SQLite's one-by-one enqueue ran at 0.74 of its
speed on an empty table (0.82 with these ids; benchmarks/scale.md).
"""

from __future__ import annotations

import time
import uuid

from django_arcature.enqueueing import new_ids


def _millis(job_id: uuid.UUID) -> int:
    return job_id.int >> 80


def test_ids_are_version_7_with_the_rfc_variant() -> None:
    for job_id in new_ids(1) + new_ids(50):
        assert job_id.version == 7
        assert job_id.variant == uuid.RFC_4122


def test_the_first_48_bits_are_the_unix_time_in_milliseconds() -> None:
    before = time.time_ns() // 1_000_000
    ids = new_ids(10)
    after = time.time_ns() // 1_000_000

    assert all(before <= _millis(job_id) <= after for job_id in ids)


def test_ids_made_later_sort_after_earlier_ones_as_text_and_as_numbers() -> None:
    earlier = new_ids(5)
    time.sleep(0.002)  # the next millisecond at least
    later = new_ids(5)

    assert max(e.int for e in earlier) < min(la.int for la in later)
    assert max(str(e) for e in earlier) < min(str(la) for la in later)


def test_the_random_part_differs_between_ids_of_one_millisecond() -> None:
    ids = new_ids(10_000)

    assert len(set(ids)) == 10_000
    assert len({job_id.int & ((1 << 62) - 1) for job_id in ids}) == 10_000
