"""The ``ARCATURE`` setting: every tunable read in one place, with its default.

Other modules call :func:`get_settings` instead of touching
``django.conf.settings`` so that a typo in a key is caught once, by the system
check in :mod:`django_arcature.checks`, rather than silently ignored.
"""

from __future__ import annotations

import copy
import difflib
import math
import os
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from .core.hint_paths import ADDED_BYTES, SOCKET_PATH_MAX_BYTES, WAKE_HINT_DIR_MAX_BYTES
from .core.limits import MAX_ATTEMPTS_MAX, MAX_TIMEOUT_SECONDS, QUEUE_MAX_LENGTH, name_problem
from .core.payloads import DEFAULT_MAX_PAYLOAD_BYTES
from .core.retry import MAX_DELAY_SECONDS, RetryPolicy

#: Defaults for every key of ``settings.ARCATURE``; documented in docs/reference/settings.md
#: (whose table a docs build checks against this dict).
DEFAULTS: dict[str, Any] = {
    # How long a claim lives without a heartbeat before the sweep may take it back.
    "LEASE_SECONDS": 30,
    # How long an idle worker waits between polls when it has no wake-up channel.
    "POLL_INTERVAL": 1.0,
    # How many jobs one claim round trip takes at most.
    "BATCH_SIZE": 50,
    # The most a worker's claims may grow to under a backlog of short jobs (None:
    # 4 x BATCH_SIZE when BATCH_SIZE is not set, else BATCH_SIZE: no growth).
    "BATCH_SIZE_MAX": None,
    # Handler threads per worker process.
    "CONCURRENCY": 4,
    # Attempts a job gets unless its @job or enqueue call says otherwise.
    "MAX_ATTEMPTS": 3,
    # Default per-attempt timeout in seconds (at most MAX_TIMEOUT_SECONDS); None means none.
    "TIMEOUT": None,
    # Timed-out handler threads a worker may leave running (Python cannot stop a
    # thread) before it stops claiming and exits non-zero, to be restarted clean.
    "MAX_ABANDONED_THREADS": 10,
    # Exponential backoff between attempts: base * factor ** (attempt - 1), capped, jittered.
    "RETRY_BASE_SECONDS": 2.0,
    "RETRY_FACTOR": 2.0,
    "RETRY_MAX_SECONDS": 600.0,
    "RETRY_JITTER": 0.1,
    # Stored error messages are cut to this many UTF-8 bytes; tracebacks to TRACEBACK_MAX_BYTES.
    "MESSAGE_MAX_BYTES": 2048,
    "TRACEBACK_MAX_BYTES": 32768,
    # How often a worker looks for expired leases, in seconds.
    "SWEEP_INTERVAL": 5.0,
    # How long a worker lets running jobs finish after SIGTERM before releasing them.
    "SHUTDOWN_TIMEOUT": 30.0,
    # The queue a job goes to when neither @job nor enqueue names one.
    "DEFAULT_QUEUE": "default",
    # Wake idle PostgreSQL workers with LISTEN/NOTIFY (turn off behind PgBouncer
    # in transaction mode, where LISTEN does not work).
    "USE_LISTEN_NOTIFY": True,
    # The DATABASES alias holding the job table (None: wherever Django's routers say,
    # usually "default"). Needs django_arcature.routers.JobsRouter in DATABASE_ROUTERS.
    "DATABASE": None,
    # The DATABASES alias the LISTEN connection uses; None: the worker's own. Behind
    # PgBouncer in transaction mode, name an alias that reaches PostgreSQL directly
    # (or through a session-mode pool) so idle workers still wake at once.
    "LISTEN_DATABASE": None,
    # Where workers bind their same-host wake-up sockets (None: a folder of this Unix
    # user's own, in XDG_RUNTIME_DIR or the temp folder; django_arcature.hints).
    # Enqueues on this host nudge idle workers through them after commit.
    "WAKE_HINTS": True,
    "WAKE_HINT_DIR": None,
    # Run jobs inline at enqueue time (for tests); still validated and recorded.
    "EAGER": False,
    # The largest job payload (its arguments as stored JSON) an enqueue accepts, in bytes.
    "MAX_PAYLOAD_BYTES": DEFAULT_MAX_PAYLOAD_BYTES,
    # Fleet-wide limits per queue (django_arcature.queues.limits).
    "QUEUES": None,
    # How long finished jobs are kept (django_arcature.retention.rules).
    "RETENTION": None,
    # The admin's text search looks at the newest this many rows of the list it is
    # run on (None: every row, a full scan on a big table); a job id is always found.
    "ADMIN_SEARCH_WINDOW": 100_000,
    # Workflows and batches (django_arcature.workflows): nodes one workflow may hold,
    # dependencies one node may wait for, members one batch may hold, and the bytes of
    # upstream results current_job().upstream() hands a node.
    "WORKFLOW_MAX_NODES": 10_000,
    "WORKFLOW_MAX_EDGES_PER_NODE": 10_000,
    "BATCH_MAX_MEMBERS": 100_000,
    "UPSTREAM_MAX_BYTES": 1024 * 1024,
    # How many times one job may raise Snooze without using an attempt.
    "MAX_SNOOZES": 100,
    # The shortest interval between two progress writes of one job, in seconds.
    "PROGRESS_INTERVAL": 1.0,
    # PostgreSQL: make every claim's commit wait for its WAL flush. Off by default: a
    # claim lost in a server crash only puts the job back to pending, and the stale
    # worker's writes are fenced out (django_arcature.db.relaxed_claim).
    "DURABLE_CLAIMS": False,
}


@dataclass(frozen=True)
class ArcatureSettings:
    """A typed, validated snapshot of ``settings.ARCATURE`` merged over the defaults."""

    lease_seconds: int = DEFAULTS["LEASE_SECONDS"]
    poll_interval: float = DEFAULTS["POLL_INTERVAL"]
    batch_size: int = DEFAULTS["BATCH_SIZE"]
    batch_size_max: int | None = DEFAULTS["BATCH_SIZE_MAX"]
    concurrency: int = DEFAULTS["CONCURRENCY"]
    max_attempts: int = DEFAULTS["MAX_ATTEMPTS"]
    timeout: float | None = DEFAULTS["TIMEOUT"]
    max_abandoned_threads: int = DEFAULTS["MAX_ABANDONED_THREADS"]
    retry_base_seconds: float = DEFAULTS["RETRY_BASE_SECONDS"]
    retry_factor: float = DEFAULTS["RETRY_FACTOR"]
    retry_max_seconds: float = DEFAULTS["RETRY_MAX_SECONDS"]
    retry_jitter: float = DEFAULTS["RETRY_JITTER"]
    message_max_bytes: int = DEFAULTS["MESSAGE_MAX_BYTES"]
    traceback_max_bytes: int = DEFAULTS["TRACEBACK_MAX_BYTES"]
    sweep_interval: float = DEFAULTS["SWEEP_INTERVAL"]
    shutdown_timeout: float = DEFAULTS["SHUTDOWN_TIMEOUT"]
    default_queue: str = DEFAULTS["DEFAULT_QUEUE"]
    use_listen_notify: bool = DEFAULTS["USE_LISTEN_NOTIFY"]
    database: str | None = DEFAULTS["DATABASE"]
    listen_database: str | None = DEFAULTS["LISTEN_DATABASE"]
    wake_hints: bool = DEFAULTS["WAKE_HINTS"]
    wake_hint_dir: str | None = DEFAULTS["WAKE_HINT_DIR"]
    eager: bool = DEFAULTS["EAGER"]
    max_payload_bytes: int = DEFAULTS["MAX_PAYLOAD_BYTES"]
    queues: Any = None
    retention: Any = None
    admin_search_window: int | None = DEFAULTS["ADMIN_SEARCH_WINDOW"]
    workflow_max_nodes: int = DEFAULTS["WORKFLOW_MAX_NODES"]
    workflow_max_edges_per_node: int = DEFAULTS["WORKFLOW_MAX_EDGES_PER_NODE"]
    batch_max_members: int = DEFAULTS["BATCH_MAX_MEMBERS"]
    upstream_max_bytes: int = DEFAULTS["UPSTREAM_MAX_BYTES"]
    max_snoozes: int = DEFAULTS["MAX_SNOOZES"]
    progress_interval: float = DEFAULTS["PROGRESS_INTERVAL"]
    durable_claims: bool = DEFAULTS["DURABLE_CLAIMS"]


def _is_number(value: object) -> bool:
    """A real, finite number: NaN passes no range check and infinity no timedelta."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


#: A week. Long jobs keep short leases alive by heartbeating; a longer lease only
#: delays the recovery of a crashed worker's jobs.
MAX_LEASE_SECONDS = 7 * 24 * 3600

#: Upper bounds of the other settings. Each is far beyond any sensible value and
#: low enough that nothing overflows (a timedelta, a thread's wait, a 32-bit
#: column) or that one worker cannot flood the database or its own memory.
MAX_INTERVAL_SECONDS = 3600
MAX_BATCH_SIZE = 10_000
MAX_CONCURRENCY = 1024
MAX_SHUTDOWN_SECONDS = 24 * 3600
MAX_STORED_TEXT_BYTES = 1024 * 1024
MAX_RETRY_FACTOR = 1000
#: MariaDB refuses a statement over ``max_allowed_packet`` (16 MiB by default), and a
#: stored JSON text may double in size once quoted into SQL.
MAX_PAYLOAD_BYTES_LIMIT = 4 * 1024 * 1024
MIN_PAYLOAD_BYTES_LIMIT = 1024
#: The admin search's window is read through an index in one statement (``OFFSET``).
MAX_SEARCH_WINDOW = 100_000_000
#: Nodes, dependencies or batch members: one workflow is built in one transaction.
MAX_WORKFLOW_SIZE = 10_000_000


def _whole(low: int, high: int) -> Any:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def _seconds(low: float, high: float, *, above_low: bool = False) -> Any:
    if above_low:
        return lambda v: _is_number(v) and low < v <= high
    return lambda v: _is_number(v) and low <= v <= high


def is_valid_timeout(value: object) -> bool:
    """None, or a finite number of seconds above 0 and at most ``MAX_TIMEOUT_SECONDS``."""
    return value is None or (_is_number(value) and 0 < value <= MAX_TIMEOUT_SECONDS)  # type: ignore[operator]


#: How to write a valid timeout, for every message that refuses one.
TIMEOUT_EXPECTED = f"None or a number of seconds above 0, up to {MAX_TIMEOUT_SECONDS} (a week)"

# key -> (check, what to write instead). Each check gets the value.
_RULES: dict[str, tuple[Any, str]] = {
    "LEASE_SECONDS": (
        _whole(1, MAX_LEASE_SECONDS),
        f"a whole number of seconds from 1 to {MAX_LEASE_SECONDS} (e.g. 30)",
    ),
    "POLL_INTERVAL": (
        _seconds(0, MAX_INTERVAL_SECONDS, above_low=True),
        f"a number of seconds above 0, up to {MAX_INTERVAL_SECONDS} (e.g. 1.0)",
    ),
    "BATCH_SIZE": (
        _whole(1, MAX_BATCH_SIZE),
        f"a whole number from 1 to {MAX_BATCH_SIZE} (e.g. 50)",
    ),
    "BATCH_SIZE_MAX": (
        lambda v: v is None or _whole(1, MAX_BATCH_SIZE)(v),
        f"None or a whole number from 1 to {MAX_BATCH_SIZE} (e.g. 200)",
    ),
    "CONCURRENCY": (
        _whole(1, MAX_CONCURRENCY),
        f"a whole number of threads from 1 to {MAX_CONCURRENCY} (e.g. 4)",
    ),
    "MAX_ATTEMPTS": (
        _whole(1, MAX_ATTEMPTS_MAX),
        f"a whole number from 1 to {MAX_ATTEMPTS_MAX} (e.g. 3)",
    ),
    "TIMEOUT": (is_valid_timeout, f"{TIMEOUT_EXPECTED}, e.g. 60"),
    "MAX_ABANDONED_THREADS": (
        _whole(0, 10_000),
        "a whole number of threads from 0 to 10000 (e.g. 10)",
    ),
    "RETRY_BASE_SECONDS": (
        _seconds(0, MAX_DELAY_SECONDS),
        f"a number of seconds from 0 to {MAX_DELAY_SECONDS} (e.g. 2)",
    ),
    "RETRY_FACTOR": (
        _seconds(1, MAX_RETRY_FACTOR),
        f"a number from 1 to {MAX_RETRY_FACTOR} (e.g. 2.0)",
    ),
    "RETRY_MAX_SECONDS": (
        _seconds(0, MAX_DELAY_SECONDS),
        f"a number of seconds from 0 to {MAX_DELAY_SECONDS} (e.g. 600)",
    ),
    "RETRY_JITTER": (_seconds(0, 1), "a fraction from 0 to 1 (e.g. 0.1)"),
    "MESSAGE_MAX_BYTES": (
        _whole(64, MAX_STORED_TEXT_BYTES),
        f"a whole number of bytes from 64 to {MAX_STORED_TEXT_BYTES} (e.g. 2048)",
    ),
    "TRACEBACK_MAX_BYTES": (
        _whole(64, MAX_STORED_TEXT_BYTES),
        f"a whole number of bytes from 64 to {MAX_STORED_TEXT_BYTES} (e.g. 32768)",
    ),
    "SWEEP_INTERVAL": (
        _seconds(0, MAX_INTERVAL_SECONDS, above_low=True),
        f"a number of seconds above 0, up to {MAX_INTERVAL_SECONDS} (e.g. 5)",
    ),
    "SHUTDOWN_TIMEOUT": (
        _seconds(0, MAX_SHUTDOWN_SECONDS),
        f"a number of seconds from 0 to {MAX_SHUTDOWN_SECONDS} (e.g. 30)",
    ),
    "DEFAULT_QUEUE": (
        lambda v: name_problem(v, "queue", QUEUE_MAX_LENGTH) is None,
        f"a queue name of 1 to {QUEUE_MAX_LENGTH} visible characters, without spaces at "
        "either end (e.g. 'default')",
    ),
    "USE_LISTEN_NOTIFY": (lambda v: isinstance(v, bool), "True or False"),
    "DATABASE": (
        lambda v: v is None or (isinstance(v, str) and v in settings.DATABASES),
        "None or the name of an entry of DATABASES (e.g. 'jobs')",
    ),
    "LISTEN_DATABASE": (
        lambda v: v is None or (isinstance(v, str) and v in settings.DATABASES),
        "None or the name of an entry of DATABASES (e.g. 'listen')",
    ),
    "WAKE_HINTS": (lambda v: isinstance(v, bool), "True or False"),
    "WAKE_HINT_DIR": (
        lambda v: (
            v is None
            or (
                isinstance(v, str)
                and os.path.isabs(v)
                and 0 < len(os.fsencode(v)) <= WAKE_HINT_DIR_MAX_BYTES
            )
        ),
        f"None or an absolute folder path of at most {WAKE_HINT_DIR_MAX_BYTES} bytes, e.g. "
        f"'/run/arcature' (a worker's socket, {ADDED_BYTES} bytes further down, must fit in "
        f"the {SOCKET_PATH_MAX_BYTES} bytes of a Unix socket path)",
    ),
    "EAGER": (lambda v: isinstance(v, bool), "True or False"),
    "MAX_PAYLOAD_BYTES": (
        _whole(MIN_PAYLOAD_BYTES_LIMIT, MAX_PAYLOAD_BYTES_LIMIT),
        f"a whole number of bytes from {MIN_PAYLOAD_BYTES_LIMIT} to {MAX_PAYLOAD_BYTES_LIMIT} "
        f"(default {DEFAULT_MAX_PAYLOAD_BYTES})",
    ),
    "ADMIN_SEARCH_WINDOW": (
        lambda v: v is None or _whole(1, MAX_SEARCH_WINDOW)(v),
        f"None or a whole number of rows from 1 to {MAX_SEARCH_WINDOW} (e.g. 100000)",
    ),
    "WORKFLOW_MAX_NODES": (
        _whole(1, MAX_WORKFLOW_SIZE),
        f"a whole number of nodes from 1 to {MAX_WORKFLOW_SIZE} (e.g. 10000)",
    ),
    "WORKFLOW_MAX_EDGES_PER_NODE": (
        _whole(1, MAX_WORKFLOW_SIZE),
        f"a whole number of dependencies from 1 to {MAX_WORKFLOW_SIZE} (e.g. 10000)",
    ),
    "BATCH_MAX_MEMBERS": (
        _whole(1, MAX_WORKFLOW_SIZE),
        f"a whole number of members from 1 to {MAX_WORKFLOW_SIZE} (e.g. 100000)",
    ),
    "UPSTREAM_MAX_BYTES": (
        _whole(1024, 64 * 1024 * 1024),
        "a whole number of bytes from 1024 to 67108864 (e.g. 1048576)",
    ),
    "MAX_SNOOZES": (_whole(0, 1_000_000), "a whole number from 0 to 1000000 (e.g. 100)"),
    "PROGRESS_INTERVAL": (
        _seconds(0, MAX_INTERVAL_SECONDS),
        f"a number of seconds from 0 to {MAX_INTERVAL_SECONDS} (e.g. 1.0)",
    ),
    "DURABLE_CLAIMS": (lambda v: isinstance(v, bool), "True or False"),
}


def _parse_queues(value: object) -> object:
    from .queues.limits import parse_limits

    return parse_limits(value)


def _parse_retention(value: object) -> object:
    from .retention.rules import parse_retention

    return parse_retention(value)


# Keys whose value has a structure of its own: validated by their parser.
_PARSED: dict[str, tuple[Any, str]] = {
    "QUEUES": (_parse_queues, "a dict like {'email': {'concurrency': 5, 'rate': '100/m'}}"),
    "RETENTION": (_parse_retention, "a dict like {'succeeded': '7d', 'dead': '30d'}"),
}


def validate(raw: object) -> list[str]:
    """Return one readable sentence per problem in a raw ``ARCATURE`` value."""
    if raw is None:
        return []
    if not isinstance(raw, dict):
        return [f"ARCATURE must be a dict, not {type(raw).__name__}."]
    problems: list[str] = []
    for key, value in raw.items():
        parsed = _PARSED.get(key)
        if parsed is not None:
            parser, expected_shape = parsed
            try:
                parser(value)
            except ValueError as exc:
                problems.append(
                    f"ARCATURE[{key!r}] = {value!r} is invalid: use {expected_shape} ({exc})."
                )
            continue
        rule = _RULES.get(key)
        if rule is None:
            problems.append(_unknown_key_message(key))
            continue
        check, expected = rule
        if not check(value):
            problems.append(f"ARCATURE[{key!r}] = {value!r} is invalid: use {expected}.")
    merged = {**DEFAULTS, **{k: v for k, v in raw.items() if k in DEFAULTS}}
    if not problems and merged["RETRY_MAX_SECONDS"] < merged["RETRY_BASE_SECONDS"]:
        problems.append(
            "ARCATURE['RETRY_MAX_SECONDS'] is below ARCATURE['RETRY_BASE_SECONDS']: "
            "raise the cap or lower the base."
        )
    return problems


def _unknown_key_message(key: object) -> str:
    nearest = difflib.get_close_matches(str(key).upper(), list(DEFAULTS), n=1, cutoff=0.6)
    hint = f" Did you mean {nearest[0]!r}?" if nearest else ""
    known = ", ".join(sorted(DEFAULTS))
    return f"ARCATURE[{key!r}] is not a known setting.{hint} Known keys: {known}."


#: The last snapshot built: (the ``ARCATURE`` object it was read from, a deep copy of
#: that value, the snapshot). Every enqueue reads the settings, and validating them
#: was a measurable part of its time; the copy catches a dict changed in place.
_cached: tuple[object, object, ArcatureSettings] | None = None


def get_settings() -> ArcatureSettings:
    """Read ``settings.ARCATURE`` now (so ``override_settings`` works in tests).

    An invalid value raises instead of falling back to a default: a queue that
    quietly runs with a lease other than the one configured is worse than one
    that refuses to start. The validated snapshot is reused while the setting
    is the same object with the same value (``setting_changed`` also drops it),
    so a hot path may call this freely.
    """
    global _cached
    raw = getattr(settings, "ARCATURE", None)
    cached = _cached
    if cached is not None and cached[0] is raw and cached[1] == raw:
        return cached[2]
    problems = validate(raw)
    if problems:
        raise ImproperlyConfigured(" ".join(problems))
    values = {**DEFAULTS, **(raw or {})}
    snapshot = ArcatureSettings(**{key.lower(): value for key, value in values.items()})
    try:
        _cached = (raw, copy.deepcopy(raw), snapshot)
    except Exception:  # a value that cannot be copied is simply read again next time
        _cached = None
    return snapshot


def configured(key: str) -> bool:
    """Whether the project's ``ARCATURE`` sets ``key`` itself, whatever the value.

    For the few defaults that depend on whether a choice was made, not on its value:
    ``BATCH_SIZE = 50`` written out is a ceiling on claims, an unset one lets them
    grow (``BATCH_SIZE_MAX``).
    """
    raw = getattr(settings, "ARCATURE", None)
    return isinstance(raw, dict) and key in raw


def _forget_settings(*, setting: str, **kwargs: object) -> None:
    """``setting_changed`` receiver: a changed ``ARCATURE`` is read afresh."""
    global _cached
    if setting == "ARCATURE":
        _cached = None


setting_changed.connect(_forget_settings, dispatch_uid="django_arcature.conf.forget_settings")


def default_retry_policy() -> RetryPolicy:
    """The project-wide backoff, from ``ARCATURE`` (a job's own policy overrides it)."""
    conf = get_settings()
    return RetryPolicy(
        base_seconds=conf.retry_base_seconds,
        factor=conf.retry_factor,
        max_seconds=conf.retry_max_seconds,
        jitter=conf.retry_jitter,
    )


def job_database(explicit: str | None = None) -> str:
    """The alias holding the job table: ``explicit`` (a ``--database`` option), else
    ``ARCATURE["DATABASE"]``, else ``"default"``.

    One rule for the worker and every command, so that moving the table to a
    database of its own (``routers.JobsRouter``) needs no option anywhere.
    """
    return explicit or get_settings().database or "default"
