"""django.tasks arguments as the framework normalises them, and as a JSON column keeps them.

Django's tasks framework (and its backport) promises a backend's users that
arguments are normalised to JSON types (``normalize_json`` in ``TaskResult``:
a tuple becomes a list, UTF-8 bytes become text, a mapping a dict) and every
framework backend takes them. So this backend accepts exactly that, and stores
the normalised call in the form a JSON column gives back (dict keys become
strings, subclasses of ``str``/``int``/``float`` their base type), so that the
``TaskResult`` returned at enqueue, the one ``get_result`` reads back and the
arguments the worker passes are the same on every database.

It refuses only what cannot come back from the database as it went in, and
with the exception types the framework itself raises: its own ``TypeError`` /
``ValueError`` for a type or value JSON has no form for (raised by its
normalisation, unchanged), and :class:`TaskArgumentsNotStorable`, a
``ValueError``, for a value the framework accepts but no JSON column keeps
(NaN, integers past 64 bits, -0.0, NUL characters, keys that collide once they are
strings, too deep or too large). ``@job`` stays stricter: see its docs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from django_arcature.conf import get_settings
from django_arcature.core.payloads import (
    MAX_NESTING,
    arguments_fit,
    ensure_arguments_json,
    ensure_payload_size,
    json_key,
)
from django_arcature.exceptions import MalformedPayload

from .compat import normalize_json

__all__ = ["TaskArgumentsNotStorable", "stored_arguments"]


class TaskArgumentsNotStorable(MalformedPayload, ValueError):
    """Arguments the framework accepts but no JSON column gives back unchanged.

    A ``ValueError``, as the framework's own normalisation raises for a value
    it cannot carry (undecodable bytes), and still a ``MalformedPayload`` for
    code that catches ours.
    """


def stored_arguments(
    args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """The call as the framework normalises it, in the form the job row keeps.

    The framework's ``normalize_json`` runs first and its exceptions pass
    through unchanged: what it refuses, we refuse alike.
    """
    normal_args = normalize_json(list(args))
    normal_kwargs = normalize_json(dict(kwargs))
    as_stored = _as_stored(normal_args, "args", -1)  # depth counted per argument
    kwargs_stored = _as_stored(normal_kwargs, "kwargs", -1)
    try:
        ensure_arguments_json(as_stored, kwargs_stored)
        limit = get_settings().max_payload_bytes
        if not arguments_fit(as_stored, kwargs_stored, limit):
            ensure_payload_size(
                {"args": as_stored, "kwargs": kwargs_stored}, limit, "the task's arguments"
            )
    except MalformedPayload as exc:
        raise TaskArgumentsNotStorable(str(exc)) from None
    return as_stored, kwargs_stored


def _as_stored(value: Any, where: str, depth: int) -> Any:
    """``value`` (already normalised) as ``json.loads(json.dumps(value))`` would give it.

    Done here rather than by a JSON round trip so that a value that would come
    back different (a NaN, a colliding key) is named, not silently changed.
    """
    if value is None or value is True or value is False:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):  # an IntEnum is stored as its number
        return int.__index__(value)
    if isinstance(value, float):
        return float.__float__(value)  # -0.0, NaN: refused by the check that follows
    if depth >= MAX_NESTING:
        raise TaskArgumentsNotStorable(
            f"{where} is nested more than {MAX_NESTING} levels deep (a structure that "
            "contains itself?): pass a flatter structure"
        )
    if isinstance(value, list):
        return [_as_stored(item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value)]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = _key_as_stored(key, where)
            if name in out:
                raise TaskArgumentsNotStorable(
                    f"{where} has the keys {key!r} and {name!r}, which JSON stores as the "
                    f"same key {name!r}: use distinct str keys"
                )
            out[name] = _as_stored(item, f"{where}[{name!r}]", depth + 1)
        return out
    # normalize_json returns only the types above; anything else is a framework change.
    raise TypeError(f"Unsupported type: {type(value)}")


def _key_as_stored(key: object, where: str) -> str:
    """A dict key as stored (:func:`~django_arcature.core.payloads.json_key`), or why not.

    JSON has no form for a non-finite float key (``json.dumps`` would write the
    non-JSON ``NaN``), so such a key is refused here with the argument named.
    """
    if isinstance(key, float) and not math.isfinite(key):
        raise TaskArgumentsNotStorable(
            f"{where} has the key {key!r}, which JSON has no form for: use str keys"
        )
    return json_key(key)
