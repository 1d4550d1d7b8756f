"""Every name the documentation promises still imports from the place it names.

The package was reorganised into sub-packages; a user's imports and settings
must not notice. Old module paths that moved keep working behind a
DeprecationWarning. Besides the pinned list below, every dotted
``django_arcature.…`` name written in README.md and docs/ must resolve.
"""

from __future__ import annotations

import importlib
import re
import warnings
from pathlib import Path

import pytest
from django.core.management import get_commands

ROOT = Path(__file__).resolve().parents[2]

#: module → names documented as importable from it.
PUBLIC = {
    "django_arcature": [
        "ArcatureError",
        "JobContext",
        "MalformedPayload",
        "Permanent",
        "RetryPolicy",
        "UnknownTask",
        "__version__",
        "current_job",
        "job",
        "periodic",
    ],
    "django_arcature.models": ["Job", "DeadJob", "JobStatus", "ErrorKind", "ACTIVE_STATUSES"],
    "django_arcature.context": ["current_job", "JobContext"],
    "django_arcature.exceptions": ["ArcatureError", "MalformedPayload", "Permanent", "UnknownTask"],
    "django_arcature.signals": [
        "job_enqueued",
        "job_succeeded",
        "job_retried",
        "job_dead",
        "job_claim_lost",
        "jobs_swept",
        "job_released",
        "job_cancelled",
        "job_requeued",
    ],
    "django_arcature.testing": [
        "assert_enqueued",
        "assert_not_enqueued",
        "drain",
        "enqueued_jobs",
        "run_job",
        "DrainSummary",
        "JobNotPending",
    ],
    "django_arcature.backend": ["ArcatureBackend", "ArcatureTask", "task", "task_overrides"],
    "django_arcature.worker": ["Worker", "WorkerStats", "default_worker_id"],
    "django_arcature.managers": ["JobManager"],
}

#: Moved modules whose old paths the 0.1 docs named; they warn, then forward.
DEPRECATED = {
    "django_arcature.dispatch": ("process",),
    "django_arcature.decide": ("decide",),
    "django_arcature.tasks_results": ("LeaseExpired", "TaskCancelled"),
    "django_arcature.tasks_compat": ("TaskResultStatus", "task_backends"),
}

MANAGER_METHODS = [
    "enqueue",
    "enqueue_many",
    "claim",
    "claim_job",
    "mark_succeeded",
    "mark_retry",
    "mark_dead",
    "heartbeat",
    "heartbeat_many",
    "release",
    "complete_many",
    "complete_batch",
    "sweep_expired_leases",
    "cancel",
    "requeue_dead",
    "run_now",
    "prune",
]

SETTINGS = [
    "LEASE_SECONDS",
    "POLL_INTERVAL",
    "BATCH_SIZE",
    "CONCURRENCY",
    "MAX_ATTEMPTS",
    "TIMEOUT",
    "RETRY_BASE_SECONDS",
    "RETRY_FACTOR",
    "RETRY_MAX_SECONDS",
    "RETRY_JITTER",
    "MESSAGE_MAX_BYTES",
    "TRACEBACK_MAX_BYTES",
    "SWEEP_INTERVAL",
    "SHUTDOWN_TIMEOUT",
    "DEFAULT_QUEUE",
    "USE_LISTEN_NOTIFY",
    "EAGER",
    "QUEUES",
    "RETENTION",
]


@pytest.mark.parametrize(
    ("module", "name"), [(module, name) for module, names in PUBLIC.items() for name in names]
)
def test_documented_name_imports_from_its_place(module: str, name: str) -> None:
    assert hasattr(importlib.import_module(module), name), f"{module}.{name}"


@pytest.mark.parametrize("module", sorted(DEPRECATED))
def test_moved_module_still_imports_with_a_deprecation_warning(module: str) -> None:
    import sys

    sys.modules.pop(module, None)
    with pytest.warns(DeprecationWarning, match="moved to"):
        imported = importlib.import_module(module)
    for name in DEPRECATED[module]:
        assert getattr(imported, name) is not None


def test_manager_methods() -> None:
    from django_arcature.models import Job

    missing = [name for name in MANAGER_METHODS if not callable(getattr(Job.objects, name, None))]
    assert not missing


def test_settings_keys() -> None:
    from django_arcature.conf import DEFAULTS

    assert set(SETTINGS) <= set(DEFAULTS)


def test_management_commands() -> None:
    commands = get_commands()
    for name in (
        "arcature_worker",
        "arcature_status",
        "arcature_schedules",
        "arcature_prune",
        "arcature_queue",
    ):
        assert commands.get(name) == "django_arcature", name


def test_admin_permissions() -> None:
    from django_arcature.models import Job

    codenames = {codename for codename, _ in Job._meta.permissions}
    assert {"cancel_job", "requeue_job", "run_job_now"} <= codenames


_DOTTED = re.compile(r"\bdjango_arcature(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def _documented_paths() -> list[str]:
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = set()
    for path in texts:
        if path.exists():
            found.update(_DOTTED.findall(path.read_text()))
    # Permission codenames ("django_arcature.cancel_job") are written like paths.
    return sorted(p for p in found if not p.endswith(("_job", "_job_now")))


@pytest.mark.parametrize("dotted", _documented_paths())
def test_every_dotted_name_in_the_docs_resolves(dotted: str) -> None:
    parts = dotted.split(".")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for split in range(len(parts), 0, -1):
            try:
                obj: object = importlib.import_module(".".join(parts[:split]))
            except ModuleNotFoundError:
                continue
            for attribute in parts[split:]:
                obj = getattr(obj, attribute)
            return
    pytest.fail(f"{dotted} does not resolve")
