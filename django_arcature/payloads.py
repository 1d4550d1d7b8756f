"""Checking a job's arguments against its handler: signature, JSON, simple annotations.

The same check runs at enqueue (so a mistake fails in the request that made it)
and in the worker before the handler (payloads written by an older deploy, or
by hand, may not fit any more): there a failure is ``Malformed``, never retried.
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .exceptions import MalformedPayload

_SUGGESTIONS: dict[type, str] = {
    set: "pass a list instead",
    frozenset: "pass a list instead",
    tuple: "pass a list instead",
    bytes: "pass a str (for example base64-encoded) instead",
}


def _hint_for(value: object) -> str:
    from datetime import date, datetime, time, timedelta
    from decimal import Decimal
    from uuid import UUID

    if hasattr(value, "_meta") and hasattr(value, "pk"):
        return f"pass its primary key (e.g. {type(value).__name__.lower()}.pk) instead"
    if isinstance(value, datetime | date | time):
        return "pass value.isoformat() and parse it in the job instead"
    if isinstance(value, timedelta):
        return "pass value.total_seconds() instead"
    if isinstance(value, Decimal):
        return "pass str(value) instead"
    if isinstance(value, UUID):
        return "pass str(value) instead"
    for kind, hint in _SUGGESTIONS.items():
        if isinstance(value, kind):
            return hint
    return "pass only JSON types: str, int, float, bool, None, list, dict with str keys"


def _find_non_json(value: object, path: str) -> tuple[str, object] | None:
    """The first value under ``value`` that does not survive JSON unchanged."""
    if value is None or isinstance(value, bool | str):
        return None
    if isinstance(value, int):
        return None
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return path, value
        return None
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _find_non_json(item, f"{path}[{index}]")
            if found:
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path} key {key!r}", key
            found = _find_non_json(item, f"{path}[{key!r}]")
            if found:
                return found
        return None
    return path, value


def ensure_json(value: object, what: str) -> None:
    """Refuse anything that would not come back from JSON as it went in."""
    found = _find_non_json(value, what)
    if found is None:
        return
    where, bad = found
    raise MalformedPayload(
        f"{where} is a {type(bad).__name__} ({bad!r:.80}), which is not JSON: {_hint_for(bad)}."
    )


def to_json_text(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


# --- Annotations ------------------------------------------------------------------

_SIMPLE = {int, str, float, bool, list, dict, type(None)}


def _matches(value: object, annotation: Any) -> bool | None:
    """True/False for annotations we understand; None for those we do not check."""
    if annotation is inspect.Parameter.empty or annotation is Any or annotation is object:
        return None
    if annotation is None or annotation is type(None):
        return value is None
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        results = [_matches(value, arg) for arg in typing.get_args(annotation)]
        if any(r is True for r in results):
            return True
        if any(r is None for r in results):
            return None
        return False
    if origin is not None:
        annotation = origin
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:  # JSON does not keep 1.0 apart from 1
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation in (list, Sequence) or annotation is typing.List:  # noqa: UP006
        return isinstance(value, list)
    if annotation in (dict, Mapping) or annotation is typing.Dict:  # noqa: UP006
        return isinstance(value, dict)
    if annotation is str:
        return isinstance(value, str)
    return None


def _describe(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def check_arguments(
    func: Callable[..., Any],
    signature: inspect.Signature,
    hints: Mapping[str, Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    skip_first: bool = False,
) -> None:
    """Raise :class:`MalformedPayload` unless ``args``/``kwargs`` fit ``func``."""
    name = getattr(func, "__qualname__", repr(func))
    ensure_json(list(args), "args")
    ensure_json(dict(kwargs), "kwargs")
    bind_to = signature
    if skip_first:
        params = list(signature.parameters.values())[1:]
        bind_to = signature.replace(parameters=params)
    try:
        bound = bind_to.bind(*args, **kwargs)
    except TypeError as exc:
        raise MalformedPayload(f"arguments do not fit {name}{bind_to}: {exc}") from None
    for param_name, value in bound.arguments.items():
        param = bind_to.parameters[param_name]
        annotation = hints.get(param_name, inspect.Parameter.empty)
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            values = list(value)
        elif param.kind is inspect.Parameter.VAR_KEYWORD:
            values = list(value.values())
        else:
            values = [value]
        for item in values:
            if _matches(item, annotation) is False:
                raise MalformedPayload(
                    f"argument {param_name!r} of {name} must be {_describe(annotation)}, "
                    f"got {type(item).__name__} {item!r:.80}"
                )


def split_payload(payload: object) -> tuple[list[Any], dict[str, Any]]:
    """The args and kwargs of a stored payload, or MalformedPayload if it has no such shape."""
    if not isinstance(payload, dict):
        raise MalformedPayload(
            f"the payload is a {type(payload).__name__}, not an object with args and kwargs"
        )
    unexpected = set(payload) - {"args", "kwargs"}
    if unexpected:
        raise MalformedPayload(f"the payload has unexpected keys: {sorted(unexpected)}")
    args = payload.get("args", [])
    kwargs = payload.get("kwargs", {})
    if not isinstance(args, list):
        raise MalformedPayload(f"payload['args'] is a {type(args).__name__}, not a list")
    if not isinstance(kwargs, dict):
        raise MalformedPayload(f"payload['kwargs'] is a {type(kwargs).__name__}, not an object")
    return args, kwargs
