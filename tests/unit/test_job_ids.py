"""Job ids are time-ordered UUIDs (version 7): unique, unguessable, and new ones sort last.

Random (version 4) ids put each new row on a random leaf of the primary-key index;
on a table of a million rows SQLite's one-by-one enqueue ran at 0.74 of its
speed on an empty table (0.82 with these ids; benchmarks/scale.md).
"""

from __future__ import annotations

import time
import uuid

from django_arcature.enqueueing import new_ids
from django_arcature.manager.bulk_rows import uuid7_values


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


# --- a bulk enqueue's ids, drawn a chunk at a time (manager.bulk_rows.uuid7_values) -----

#: The 74 bits of a version-7 id that are random: rand_a (bits 64-75) and rand_b (0-61).
_RANDOM_BITS = [*range(62), *range(64, 76)]


def test_chunk_ids_are_version_7_with_the_rfc_variant_and_this_millisecond() -> None:
    before = time.time_ns() // 1_000_000
    values = uuid7_values(1) + uuid7_values(3000)
    after = time.time_ns() // 1_000_000

    assert len(values) == 3001
    for value in values:
        job_id = uuid.UUID(int=value)
        assert job_id.version == 7
        assert job_id.variant == uuid.RFC_4122
        assert before <= _millis(job_id) <= after


def test_every_random_bit_of_chunk_ids_varies_and_no_fixed_bit_does() -> None:
    """The fixed bits (time, version, variant) are written into each id, the other 74
    are drawn: across 3,000 ids each random bit is seen both set and clear, and no
    two ids are the same (a bit left fixed, or one record's bytes written into
    another's, would show here)."""
    values = uuid7_values(3000)

    assert len(set(values)) == 3000
    assert len({value & ((1 << 62) - 1) for value in values}) == 3000
    for bit in _RANDOM_BITS:
        seen = {(value >> bit) & 1 for value in values}
        assert seen == {0, 1}, bit
    assert {(value >> 76) & 0xF for value in values} == {7}
    assert {(value >> 62) & 0b11 for value in values} == {0b10}


def test_no_chunk_ids_for_no_rows() -> None:
    assert uuid7_values(0) == []
