"""decide(): every dispatch outcome against attempts left, attempts used up, and permanence.

The table below is the whole of DESIGN §3; a row added to decide() without a row
here, or a row here that decide() no longer honours, fails.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from django_arcature import Permanent
from django_arcature.core import decide
from django_arcature.core.decide import (
    Dead,
    DispatchOutcome,
    ErrorKind,
    HandlerError,
    JobState,
    Malformed,
    Panic,
    Retry,
    Succeeded,
    Timeout,
    Unknown,
)
from django_arcature.core.retry import RetryPolicy

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
# No jitter: the retry time is exactly now + base * factor ** (attempts - 1).
POLICY = RetryPolicy(base_seconds=10, factor=3, max_seconds=3600, jitter=0)

FIRST = JobState(attempts=1, max_attempts=3)  # attempts left
MIDDLE = JobState(attempts=2, max_attempts=3)  # attempts left
LAST = JobState(attempts=3, max_attempts=3)  # used up
BEYOND = JobState(attempts=4, max_attempts=3)  # used up (e.g. max lowered after enqueue)
ONLY = JobState(attempts=1, max_attempts=1)  # used up on the first run

STATES_LEFT = [FIRST, MIDDLE]
STATES_EXHAUSTED = [LAST, BEYOND, ONLY]
ALL_STATES = STATES_LEFT + STATES_EXHAUSTED

ERROR = HandlerError("ValueError: boom", permanent=False, traceback="tb-error")
PERMANENT = HandlerError("Permanent: no address", permanent=True, traceback="tb-permanent")


def retry_at(state: JobState) -> datetime:
    return NOW + timedelta(seconds=10 * 3 ** (state.attempts - 1))


# (dispatch, state, expected). Every DispatchOutcome appears with every state.
TABLE: list[tuple[DispatchOutcome, JobState, object]] = []
for state in ALL_STATES:
    TABLE += [
        (Succeeded(result={"n": 1}), state, Succeeded(result={"n": 1})),
        (
            Malformed("missing argument 'user_id'"),
            state,
            Dead(
                ErrorKind.MALFORMED, "payload does not fit the handler: missing argument 'user_id'"
            ),
        ),
        (
            Unknown("app.gone"),
            state,
            Dead(ErrorKind.UNKNOWN, "no job handler is registered under 'app.gone'"),
        ),
        (
            Unknown("app.views.f", reason="module 'app.views' is not a tasks module"),
            state,
            Dead(
                ErrorKind.UNKNOWN,
                "not running 'app.views.f': module 'app.views' is not a tasks module",
            ),
        ),
        (
            Unknown(
                "app.gone", detail="No job handler is registered under 'app.gone'. Did you mean?"
            ),
            state,
            Dead(ErrorKind.UNKNOWN, "No job handler is registered under 'app.gone'. Did you mean?"),
        ),
        (
            Panic("SystemExit: 3", traceback="tb-panic"),
            state,
            Dead(ErrorKind.PANIC, "SystemExit: 3", "tb-panic"),
        ),
        (PERMANENT, state, Dead(ErrorKind.PERMANENT, PERMANENT.message, "tb-permanent")),
    ]
for state in STATES_LEFT:
    TABLE += [
        (
            Timeout(5),
            state,
            Retry(retry_at(state), f"attempt {state.attempts} exceeded its timeout of 5s"),
        ),
        (ERROR, state, Retry(retry_at(state), ERROR.message, "tb-error")),
    ]
for state in STATES_EXHAUSTED:
    TABLE += [
        (
            Timeout(2.5),
            state,
            Dead(
                ErrorKind.TIMEOUT,
                f"attempt {state.attempts} exceeded its timeout of 2.5s; "
                f"no attempts left of {state.max_attempts}",
            ),
        ),
        (ERROR, state, Dead(ErrorKind.EXHAUSTED, ERROR.message, "tb-error")),
    ]


@pytest.mark.parametrize(("dispatch", "state", "expected"), TABLE)
def test_decide_table(dispatch: DispatchOutcome, state: JobState, expected: object) -> None:
    assert decide.decide(state, dispatch, POLICY, NOW) == expected


def test_table_covers_every_dispatch_outcome_in_every_state() -> None:
    kinds = {(type(d).__name__, d == PERMANENT, s) for d, s, _ in TABLE}
    for state in ALL_STATES:
        for name in ("Succeeded", "Malformed", "Unknown", "Timeout", "HandlerError", "Panic"):
            assert (name, False, state) in kinds, (name, state)
        assert ("HandlerError", True, state) in kinds


def test_retry_time_uses_the_attempt_count_and_the_given_clock() -> None:
    later = NOW + timedelta(days=1)
    first = decide.decide(FIRST, ERROR, POLICY, later)
    second = decide.decide(MIDDLE, ERROR, POLICY, later)
    assert isinstance(first, Retry)
    assert isinstance(second, Retry)
    assert first.available_at == later + timedelta(seconds=10)
    assert second.available_at == later + timedelta(seconds=30)


def test_retry_time_is_capped_by_the_policy() -> None:
    state = JobState(attempts=50, max_attempts=100)
    outcome = decide.decide(state, ERROR, POLICY, NOW)
    assert outcome == Retry(NOW + timedelta(seconds=3600), ERROR.message, "tb-error")


def test_a_per_job_policy_is_what_decides_the_delay() -> None:
    slow = RetryPolicy(base_seconds=100, factor=2, max_seconds=1000, jitter=0)
    outcome = decide.decide(MIDDLE, Timeout(1), slow, NOW)
    assert isinstance(outcome, Retry)
    assert outcome.available_at == NOW + timedelta(seconds=200)


def test_decide_is_pure_same_inputs_same_outcome() -> None:
    draws = iter([0.25, 0.25])
    policy = RetryPolicy(base_seconds=8, jitter=0.5, random=lambda: next(draws))
    first = decide.decide(FIRST, ERROR, policy, NOW)
    second = decide.decide(FIRST, ERROR, policy, NOW)
    assert first == second == Retry(NOW + timedelta(seconds=7), ERROR.message, "tb-error")


def test_handler_error_from_exception() -> None:
    try:
        raise Permanent("user has no email address")
    except Permanent as exc:
        permanent = HandlerError.from_exception(exc)
    assert permanent.permanent
    assert permanent.message == "Permanent: user has no email address"
    assert permanent.exception_type == "django_arcature.exceptions.Permanent"
    assert "raise Permanent" in permanent.traceback

    plain = HandlerError.from_exception(RuntimeError())
    assert not plain.permanent
    assert plain.message == "RuntimeError"
    assert plain.exception_type == "builtins.RuntimeError"

    class Subclassed(Permanent):
        pass

    assert HandlerError.from_exception(Subclassed("x")).permanent


def test_panic_from_a_base_exception() -> None:
    panic = Panic.from_exception(KeyboardInterrupt())
    assert panic.message == "KeyboardInterrupt"
    assert panic.exception_type == "builtins.KeyboardInterrupt"
    outcome = decide.decide(FIRST, panic, POLICY, NOW)
    assert outcome == Dead(ErrorKind.PANIC, "KeyboardInterrupt", panic.traceback)


def test_decide_refuses_what_is_not_a_dispatch_outcome() -> None:
    with pytest.raises(TypeError, match="not a dispatch outcome"):
        decide.decide(FIRST, "succeeded", POLICY, NOW)  # type: ignore[arg-type]


def test_job_state_exhausted() -> None:
    assert not FIRST.exhausted
    assert not MIDDLE.exhausted
    assert all(state.exhausted for state in STATES_EXHAUSTED)


def test_error_kinds_match_the_model_choices() -> None:
    from django_arcature.models import ErrorKind as ModelErrorKind

    assert [kind.value for kind in ErrorKind] == list(ModelErrorKind.values)
    for kind in ErrorKind:
        assert ModelErrorKind(kind.value).value == kind.value


# --- No database in the pure core -----------------------------------------------------

PACKAGE = Path(decide.__file__).resolve().parent


@pytest.mark.parametrize("module", ["decide", "retry"])
def test_pure_module_source_imports_nothing_from_django_db(module: str) -> None:
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    imported: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.append(node.module)
    assert imported, "the scan found no imports at all: it is not reading the module"
    assert not [name for name in imported if name == "django" or name.startswith("django.")]


def test_importing_the_pure_core_loads_no_django_db() -> None:
    """Transitively too: a subprocess imports both and lists what got loaded."""
    code = (
        "import json, sys\n"
        "import django_arcature.core.decide, django_arcature.core.retry\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    root = PACKAGE.parent
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True
    )
    loaded = json.loads(done.stdout)
    assert "django_arcature.core.decide" in loaded
    assert [name for name in loaded if name == "django.db" or name.startswith("django.db.")] == []
