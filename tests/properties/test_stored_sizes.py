"""Issue 19 C: every stored size bounded.

Whatever a job's history (attempt counts, tracebacks and messages of any size,
multibyte text, emoji, NUL, lone surrogates) and whatever its result, no
completion statement may be over the smallest server packet limit we support
(MariaDB's default ``max_allowed_packet``, 16 MiB) nor over this server's
statement budget, and the stored attempt log stays within its cap. Each
statement is measured as its driver sends it (``mogrify`` on MariaDB).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from django_arcature.core.attempt_log import (
    ATTEMPT_LOG_KEEP_FIRST,
    ATTEMPT_LOG_KEEP_LATEST,
    ATTEMPT_LOG_MAX_BYTES,
    dropped_count,
)
from django_arcature.core.text import json_size
from django_arcature.db.budget import SMALLEST_PACKET_BYTES, statement_budget
from django_arcature.models import Job
from django_arcature.transitions import ClaimTransition, Completion, wrote_claim
from tests.faults.test_completion_sizes import measured

from .conftest import PROFILE, TALLY

pytestmark = pytest.mark.django_db(transaction=True)

#: Pieces a text is built of: ASCII, quotes and backslashes (escaped twice on MariaDB),
#: multibyte, emoji, NUL and lone surrogates (cleaned), control characters (\\u00XX).
PIECES = st.sampled_from(["a", "'", '"', "\\", "é", "€", "\U0001f600", "\x00", "\ud800", "\x01"])


@st.composite
def texts(draw: st.DrawFn, most: int) -> str:
    """A text up to about ``most`` characters: a short random run repeated."""
    run = "".join(draw(st.lists(PIECES, min_size=1, max_size=8)))
    return run * draw(st.integers(0, max(most // len(run), 0)))


def entry(n: int, traceback: str) -> dict[str, Any]:
    return {
        "worker": f"w{n}",
        "error": {"exception_class_path": "builtins.RuntimeError", "traceback": traceback},
    }


ATTEMPTS_MOST = 2000 if PROFILE == "soak" else 600
TEXT_MOST = 40_000


@settings(max_examples=60 if PROFILE == "soak" else 6)
@given(
    attempts=st.integers(0, ATTEMPTS_MOST),
    traceback=texts(TEXT_MOST),
    message=texts(4000),
    kind=st.sampled_from(["succeeded", "retry", "dead"]),
    result=st.one_of(
        st.none(),
        st.integers(),
        texts(250_000),
        st.builds(lambda s: {"k": s, "list": [s, s]}, texts(80_000)),
    ),
    rows=st.integers(1, 3),
)
def test_no_completion_statement_is_over_the_packet_limit(
    attempts: int, traceback: str, message: str, kind: str, result: Any, rows: int
) -> None:
    Job.objects.all().delete()
    for _ in range(rows):
        Job.objects.enqueue("tests.noop", max_attempts=10_000)
    claimed = Job.objects.claim("w1", lease=60, batch=rows)
    assert len(claimed) == rows
    history = [entry(n, traceback) for n in range(attempts)]
    completions = [
        Completion(
            job.id,
            job.claim_token,
            kind,
            result=result if kind == "succeeded" else None,
            available_at=timezone.now() if kind == "retry" else None,
            error_kind="permanent" if kind == "dead" else "",
            message=message,
            traceback=traceback,
            attempt_log=[*history, {"worker": "w1", "error": None if kind == "succeeded" else {}}],
        )
        for job in claimed
    ]
    with measured() as sizes:
        outcomes = Job.objects.complete_batch(completions)
    assert outcomes == [ClaimTransition.UPDATED] * rows
    assert max(sizes) <= statement_budget(connection.alias) < SMALLEST_PACKET_BYTES
    for job in claimed:
        row = Job.objects.get(id=job.id)
        log = row.attempt_log
        assert json_size(log) <= ATTEMPT_LOG_MAX_BYTES
        assert len(log) <= ATTEMPT_LOG_KEEP_FIRST + ATTEMPT_LOG_KEEP_LATEST + 1
        assert wrote_claim(log, job.claim_token)
        kept = sum(1 for item in log if "worker" in item)
        assert kept + dropped_count(log) == attempts + 1
        assert row.status == {"succeeded": "succeeded", "retry": "pending", "dead": "dead"}[kind]
    TALLY.setdefault("stored sizes", Counter())["examples"] += 1
