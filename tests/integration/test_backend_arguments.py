"""django.tasks arguments: what the framework accepts, our backend accepts (issue 19, A2).

Django's tasks framework (6.x) and its backport (5.2) normalise a task's
arguments to JSON types in ``TaskResult`` (``normalize_json``: a tuple becomes a
list, bytes become text) and every framework backend takes them. Before, our
backend refused a tuple with ``InvalidTaskArguments``, so a package enqueueing
``delete_file(storage.deconstruct(), name)`` raised in its caller. Now the
backend stores exactly what the normalisation gives (as JSON stores it), refuses
only what cannot come back from the database, and raises the exception types
the framework itself raises for such values (TypeError for a type JSON has no
form for, ValueError for a value it cannot keep). ``@job`` stays stricter.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
from django.db import transaction

from django_arcature.exceptions import MalformedPayload
from django_arcature.models import Job
from django_arcature.tasks.compat import TaskResultStatus, normalize_json
from django_arcature.testing import drain
from tests.integration import api_jobs
from tests.integration import backend_tasks as tasks

pytestmark = pytest.mark.django_db


def stored(args: Any, kwargs: Any) -> dict[str, Any]:
    """What a JSON column gives back for the framework's normalisation of the call."""
    loaded: dict[str, Any] = json.loads(
        json.dumps({"args": normalize_json(args), "kwargs": normalize_json(kwargs)})
    )
    return loaded


def framework_error(value: object) -> type[Exception]:
    """The exception the framework's own normalisation raises for ``value``."""
    try:
        normalize_json([value])
    except Exception as exc:
        return type(exc)
    raise AssertionError(f"the framework accepts {value!r}")


DECONSTRUCTED = (
    "django.core.files.storage.FileSystemStorage",
    (),
    {"location": "/srv/media", "base_url": None},
)

ROUND_TRIPS = [
    pytest.param(((1, 2),), {}, id="tuple"),
    pytest.param(((1, (2, (3, ()))),), {}, id="nested-tuples"),
    pytest.param(({"a": (1, 2), "b": {"c": (3,)}},), {}, id="tuples-in-dicts"),
    pytest.param((), {"where": ("x", [("y",)])}, id="tuple-keyword"),
    pytest.param((b"text", [b"bytes"]), {}, id="utf8-bytes"),
    pytest.param(({1: "one", 2.5: "x", False: "f", None: "n"},), {}, id="non-str-keys"),
    pytest.param((DECONSTRUCTED, "photos/a.jpg"), {}, id="deconstruct"),
    pytest.param(((),), {"nothing": ()}, id="empty-tuples"),
]


@pytest.mark.parametrize(("args", "kwargs"), ROUND_TRIPS)
def test_what_the_framework_normalises_is_stored_and_passed_as_normalised(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    result = tasks.echo_arguments.enqueue(*args, **kwargs)

    expected = stored(args, kwargs)
    assert (result.args, result.kwargs) == (expected["args"], expected["kwargs"])
    job = Job.objects.get(pk=result.id)
    assert (job.args, job.kwargs) == (expected["args"], expected["kwargs"])
    drain()
    fetched = tasks.echo_arguments.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL, fetched.errors
    assert fetched.return_value == expected
    assert (fetched.args, fetched.kwargs) == (expected["args"], expected["kwargs"])


def test_a_storage_package_deleting_a_file_on_commit_enqueues_and_runs(
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        transaction.on_commit(lambda: tasks.delete_file.enqueue(DECONSTRUCTED, "photos/a.jpg"))

    [job] = Job.objects.all()
    drain()
    fetched = tasks.delete_file.get_result(str(job.id))
    assert fetched.status == TaskResultStatus.SUCCESSFUL, fetched.errors
    assert fetched.return_value == {
        "storage": "django.core.files.storage.FileSystemStorage",
        "args": [],
        "kwargs": {"location": "/srv/media", "base_url": None},
        "deleted": "photos/a.jpg",
    }


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(datetime(2026, 1, 1), id="datetime"),
        pytest.param({1, 2}, id="set"),
        pytest.param(object(), id="object"),
        pytest.param(b"\xff\xfe", id="non-utf8-bytes"),
    ],
)
def test_what_the_framework_refuses_is_refused_with_its_exception_type(value: object) -> None:
    expected = framework_error(value)

    with pytest.raises(expected):
        tasks.echo_arguments.enqueue(value)
    with pytest.raises(expected):
        tasks.echo_arguments.enqueue(nested={"deep": [value]})
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("value", "why"),
    [
        pytest.param(float("nan"), "NaN", id="nan"),
        pytest.param(float("inf"), "finite", id="infinity"),
        pytest.param(2**70, "64 bits", id="huge-int"),
        pytest.param("a\x00b", "NUL", id="nul-character"),
        pytest.param("\ud800", "surrogate", id="lone-surrogate"),
        pytest.param({1: "a", "1": "b"}, "same key", id="colliding-keys"),
    ],
)
def test_what_cannot_come_back_from_the_database_is_a_value_error(value: object, why: str) -> None:
    """The framework takes these, but no JSON column gives them back as they went in."""
    normalize_json([value])  # the framework itself accepts it

    with pytest.raises(ValueError, match=why):
        tasks.echo_arguments.enqueue(value)
    assert not Job.objects.exists()


def test_arguments_are_not_checked_against_the_signature_at_enqueue() -> None:
    """The framework enqueues any call; the worker finds the mismatch and says so."""
    loose = tasks.annotated_int.enqueue("not an int")  # type: ignore[arg-type]
    unbound = tasks.add.enqueue(1)  # type: ignore[call-arg]

    drain()

    assert tasks.annotated_int.get_result(loose.id).return_value == "not an int"
    failed = tasks.add.get_result(unbound.id)
    assert failed.status == TaskResultStatus.FAILED
    job = Job.objects.get(pk=unbound.id)
    assert (job.status, job.error_kind) == ("dead", "malformed")
    assert "do not fit" in job.last_error


def test_job_stays_stricter_than_the_framework() -> None:
    with pytest.raises(MalformedPayload, match="pass a list instead"):
        api_jobs.greet.enqueue((1, 2))  # type: ignore[arg-type]
    assert not Job.objects.exists()
