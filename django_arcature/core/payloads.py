"""Checking a job's arguments against its handler: signature, JSON, simple annotations.

The same check runs at enqueue (so a mistake fails in the request that made it)
and in the worker before the handler (payloads written by an older deploy, or
by hand, may not fit any more): there a failure is ``Malformed``, never retried.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import inspect
import json
import math
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import PurePath
from typing import Any
from uuid import UUID

from django_arcature.exceptions import MalformedPayload

#: Integers outside this range do not survive MySQL's JSON type unchanged (they
#: become doubles), so they are refused everywhere to keep the databases alike.
INT_MIN, INT_MAX = -(2**63), 2**64 - 1
_INT_RANGE = (INT_MIN, INT_MAX)
#: Lists and dicts nested inside one argument (or one return value) at most this deep.
#: MariaDB's JSON check refuses documents nested 32 levels deep, and the payload's own
#: ``{"args": [...]}`` adds two; 20 leaves room and still catches a structure that
#: contains itself.
MAX_NESTING = 20
#: The default of ``ARCATURE["MAX_PAYLOAD_BYTES"]``: one job's arguments as stored JSON.
#: MariaDB refuses a statement over ``max_allowed_packet`` (16 MiB by default), and a
#: bulk INSERT carries many payloads; a job's arguments are meant to be ids and small
#: values, not documents.
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
#: Text no database stores the same way: PostgreSQL refuses NUL (``\u0000``) in JSON and
#: text; PostgreSQL and MariaDB refuse lone surrogates, which are not Unicode at all.
_UNSTORABLE_TEXT = re.compile("[\x00\ud800-\udfff]")


def _hint_for(value: object, where: str) -> str:
    """What to pass instead of ``value``, in the caller's own terms where possible."""
    name = where if where.isidentifier() else "value"
    if hasattr(value, "_meta") and hasattr(value, "pk"):
        model = type(value).__name__
        return (
            f"pass its primary key ({model.lower()}.pk) instead and load the {model} "
            "in the job, so the job sees the row as it is when it runs"
        )
    if hasattr(value, "model") and hasattr(value, "values_list"):
        return f"pass a list of primary keys instead: list({name}.values_list('pk', flat=True))"
    if isinstance(value, datetime):
        return f"pass {name}.isoformat() instead and parse it with datetime.fromisoformat()"
    if isinstance(value, date | time):
        return f"pass {name}.isoformat() instead and parse it with fromisoformat()"
    if isinstance(value, timedelta):
        return f"pass {name}.total_seconds() instead"
    if isinstance(value, Decimal):
        return f"pass str({name}) instead and rebuild it with Decimal(...) (a float loses digits)"
    if isinstance(value, UUID | PurePath):
        return f"pass str({name}) instead"
    if isinstance(value, enum.Enum):
        return f"pass {name}.value instead"
    if isinstance(value, set | frozenset):
        return f"pass a list instead, e.g. sorted({name})"
    if isinstance(value, tuple):
        return f"pass a list instead: list({name}) (JSON would return it as a list)"
    if isinstance(value, bytes | bytearray | memoryview):
        return "pass a str instead (decode text, or base64-encode binary data)"
    if isinstance(value, float):
        return "pass a finite number (JSON has no NaN or Infinity), or None"
    if isinstance(value, int):
        return f"pass str({name}) instead: integers beyond 64 bits do not survive every database"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return f"pass dataclasses.asdict({name}) instead and rebuild it in the job"
    if callable(value):
        return "pass data, not code: enqueue a job for that function instead"
    if isinstance(value, Iterator):
        return f"pass a list instead: list({name})"
    return "pass only JSON types: str, int, float, bool, None, and lists or dicts of them"


class _TooDeep:
    """Marks a structure nested past ``MAX_NESTING``."""


@dataclasses.dataclass(frozen=True)
class _NonStrKey:
    """Marks a dict key that is not a str (JSON would turn it into one)."""

    key: object


@dataclasses.dataclass(frozen=True)
class _BadText:
    """Marks a str (a value, or a dict key when ``key``) that no database stores alike."""

    text: str
    key: bool = False


@dataclasses.dataclass(frozen=True)
class _NegativeZero:
    """Marks ``-0.0``: PostgreSQL's JSON numbers have no sign on zero."""


def _find_non_json(value: object, path: str, depth: int = 0) -> tuple[str, object] | None:
    """The first value under ``value`` that would not come back from JSON unchanged,
    on every database alike."""
    if value is None or isinstance(value, bool):
        return None
    if type(value) is str:
        return (path, _BadText(value)) if _UNSTORABLE_TEXT.search(value) else None
    if type(value) is int:
        return None if _INT_RANGE[0] <= value <= _INT_RANGE[1] else (path, value)
    if type(value) is float:
        if not math.isfinite(value):
            return path, value
        if value == 0.0 and math.copysign(1.0, value) < 0:
            return path, _NegativeZero()
        return None
    if type(value) is list:
        if depth >= MAX_NESTING:
            return path, _TooDeep()
        for index, item in enumerate(value):
            found = _find_non_json(item, f"{path}[{index}]", depth + 1)
            if found:
                return found
        return None
    if type(value) is dict:
        if depth >= MAX_NESTING:
            return path, _TooDeep()
        for key, item in value.items():
            if type(key) is not str:
                return path, _NonStrKey(key)
            if _UNSTORABLE_TEXT.search(key):
                return path, _BadText(key, key=True)
            found = _find_non_json(item, f"{path}[{key!r}]", depth + 1)
            if found:
                return found
        return None
    # Subclasses (enums, lazy strings, OrderedDict…) load back as their base type.
    return path, value


def _bad_text_message(where: str, bad: _BadText) -> str:
    match = _UNSTORABLE_TEXT.search(bad.text)
    assert match is not None
    char = match.group()
    place = f"has a key ({_short_repr(bad.text)}) that contains" if bad.key else "contains"
    if char == "\x00":
        return (
            f"{where} {place} a NUL character (\\x00), which PostgreSQL cannot store: "
            "remove it, or pass binary data base64-encoded."
        )
    return (
        f"{where} {place} a lone surrogate (U+{ord(char):04X}), which is not valid Unicode "
        "and which PostgreSQL and MariaDB refuse: decode bytes with errors='replace', or "
        "pass them base64-encoded."
    )


def ensure_json(value: object, what: str, *, label: str = "") -> None:
    """Refuse anything that would not come back from JSON exactly as it went in,
    on every supported database.

    ``what`` is how the value is spelled in the caller's code (a parameter name,
    ``args``); ``label`` goes before it in the message (``"argument "``).
    """
    found = _find_non_json(value, what)
    if found is None:
        return
    path, bad = found
    where = label + (repr(path) if label and path.isidentifier() else path)
    if isinstance(bad, _TooDeep):
        raise MalformedPayload(
            f"{what} is nested more than {MAX_NESTING} levels deep (a list or dict that "
            "contains itself?): pass a flatter structure"
        )
    if isinstance(bad, _NonStrKey):
        raise MalformedPayload(
            f"{where} has the key {_short_repr(bad.key)} ({type(bad.key).__name__}), but JSON "
            f"object keys are strings and it would come back as {str(bad.key)!r}: use str "
            "keys, e.g. {str(k): v for k, v in ...}, and convert them back in the job."
        )
    if isinstance(bad, _BadText):
        raise MalformedPayload(_bad_text_message(where, bad))
    if isinstance(bad, _NegativeZero):
        raise MalformedPayload(
            f"{where} is -0.0, whose sign PostgreSQL does not keep: pass 0.0 (or abs(value))."
        )
    kind = type(bad).__name__
    if hasattr(bad, "_meta") and hasattr(bad, "pk"):
        kind = f"{kind} instance"
    article = "an" if kind[0] in "aeioAEIO" else "a"
    raise MalformedPayload(
        f"{where} is {article} {kind} ({_short_repr(bad)}), which JSON cannot carry "
        f"unchanged: {_hint_for(bad, path)}."
    )


def _ensure_keys(mapping: Mapping[Any, Any], what: str) -> None:
    for key in mapping:
        if isinstance(key, str) and _UNSTORABLE_TEXT.search(key):
            raise MalformedPayload(_bad_text_message(what, _BadText(key, key=True)))


def ensure_arguments_json(args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """:func:`ensure_json` for each argument on its own, nesting counted from the argument
    (as :func:`check_arguments` counts it), and the keyword names themselves."""
    for index, item in enumerate(args):
        ensure_json(item, f"args[{index}]")
    _ensure_keys(kwargs, "kwargs")
    for key, item in kwargs.items():
        if type(key) is not str:
            raise MalformedPayload(f"kwargs has the key {_short_repr(key)}: keyword names are str")
        ensure_json(item, key, label="argument ")


# --- Size ---------------------------------------------------------------------------


def _size_bound(value: object) -> int:
    """An upper bound on ``value``'s stored JSON size in bytes, cheap to compute.

    Non-ASCII is stored escaped (``\\uXXXX``, twelve bytes for a character outside
    the BMP), so a string's bound is twelve bytes a character; a float may be
    written in full (see :class:`ExactJSONEncoder`), up to 330 bytes. Plain loops,
    not ``sum()`` over generators: a bulk enqueue computes this for every row.
    """
    kind = type(value)
    if kind is str:
        return 12 * len(value) + 2  # type: ignore[arg-type]
    if kind is list:
        total = 2
        for item in value:  # type: ignore[attr-defined]
            total += _size_bound(item) + 1
        return total
    if kind is dict:
        total = 2
        for key, item in value.items():  # type: ignore[attr-defined]
            total += 12 * len(key) + 4 + _size_bound(item)
        return total
    if kind is float:
        return 330
    return 24


def arguments_fit(args: list[Any], kwargs: dict[str, Any], max_bytes: int) -> bool:
    """True when the payload of ``args``/``kwargs`` is surely within ``max_bytes``
    (the common case, decided without writing any JSON)."""
    return 30 + _size_bound(args) + _size_bound(kwargs) <= max_bytes


def payload_size(payload: object) -> int:
    """The size in bytes of ``payload`` as it is stored (compact JSON, non-ASCII escaped)."""
    return len(json.dumps(payload, cls=ExactJSONEncoder, separators=(",", ":")))


def ensure_payload_size(payload: object, max_bytes: int, what: str) -> None:
    """Refuse a payload whose stored JSON is over ``max_bytes`` (checked exactly only
    when the cheap bound says it could be)."""
    if _size_bound(payload) <= max_bytes:
        return
    size = payload_size(payload)
    if size > max_bytes:
        raise MalformedPayload(
            f"{what} are {size} bytes of JSON, over the limit of {max_bytes} bytes "
            "(ARCATURE['MAX_PAYLOAD_BYTES']): pass ids or a storage key and load the "
            "data in the job, or raise the limit."
        )


# --- Writing JSON every database reads back the same -----------------------------------


class ExactJSONEncoder(json.JSONEncoder):
    """``json.JSONEncoder`` that writes large floats so PostgreSQL reads them back as floats.

    PostgreSQL's ``jsonb`` keeps numbers as ``numeric``, which prints ``1e+16`` as
    ``10000000000000000``: that reads back as an int. Floats that Python writes
    with a positive exponent are written in full with a ``.0`` instead, which every
    database keeps as it is and which parses back to the same float. Everything
    else is exactly what ``json.dumps`` writes.
    """

    def encode(self, o: Any) -> str:
        text = super().encode(o)
        if "e+" not in text:  # no large float (or only the letters, in a string)
            return text
        return "".join(self._exact(o))

    def _exact(self, o: Any) -> Iterator[str]:
        if type(o) is float and math.isfinite(o):
            text = float.__repr__(o)
            yield format(Decimal(text), "f") + ".0" if "e+" in text else text
        elif isinstance(o, list | tuple):
            yield "["
            for index, item in enumerate(o):
                if index:
                    yield self.item_separator
                yield from self._exact(item)
            yield "]"
        elif isinstance(o, dict):
            yield "{"
            for index, (key, item) in enumerate(o.items()):
                if index:
                    yield self.item_separator
                yield super().encode(json_key(key))
                yield self.key_separator
                yield from self._exact(item)
            yield "}"
        elif o is None or isinstance(o, str | int | float | bool):
            yield super().encode(o)
        else:
            yield from self._exact(self.default(o))


def json_key(key: object) -> str:
    """A dict key as ``json.dumps`` writes it.

    One rule for the two places that need it: :class:`ExactJSONEncoder` writes
    keys with it, and the task-argument check (``tasks/arguments.py``) uses it to
    find keys that would collide once stored, so the key it checks is the key
    written. A non-finite float becomes ``NaN``/``Infinity`` as in ``json.dumps``;
    the argument check refuses those before asking. A str, int or float subclass
    (an enum member) is written as its plain value.
    """
    if isinstance(key, str):
        return str.__str__(key)
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, int | float):
        return json.dumps(key)
    raise TypeError(f"Unsupported type: {type(key)}")


def _short_repr(value: object) -> str:
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not hide the real message
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."


def to_json_text(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


# --- Annotations ------------------------------------------------------------------


def resolve_hints(func: Callable[..., Any]) -> dict[str, Any]:
    """Each parameter's annotation, evaluated where possible.

    Resolved one by one, so a module using ``from __future__ import annotations``
    with an import under ``TYPE_CHECKING`` loses only that parameter's check,
    not all of them.
    """
    try:
        raw = inspect.get_annotations(func)
    except Exception:
        return {}
    namespace = dict(getattr(func, "__globals__", {}))
    hints: dict[str, Any] = {}
    for name, annotation in raw.items():
        if name == "return":
            continue
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, namespace)  # the handler module's own annotation text
            except Exception:
                continue
        hints[name] = annotation
    return hints


def _takes_float_not_str(annotation: Any) -> bool:
    """Whether an annotation accepts a float but refuses a str (``float``, ``float | None``)."""
    return _matches(0.5, annotation) is True and _matches("", annotation) is False


def _matches(value: object, annotation: Any) -> bool | None:
    """True/False for annotations understood here; None for those left unchecked."""
    if annotation is inspect.Parameter.empty or annotation is Any or annotation is object:
        return None
    if annotation is None or annotation is type(None):
        return value is None
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _matches(value, args[0])
    if origin in (typing.Union, types.UnionType):
        results = [_matches(value, arg) for arg in args]
        if any(r is True for r in results):
            return True
        if any(r is None for r in results):
            return None
        return False
    if origin is typing.Literal:
        return any(value == arg and type(value) is type(arg) for arg in args)
    base = origin if origin is not None else annotation
    if base is bool:
        return isinstance(value, bool)
    if base is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if base is float:  # JSON does not keep 1.0 apart from 1 on every database
        return isinstance(value, int | float) and not isinstance(value, bool)
    if base is str:
        return isinstance(value, str)
    if base in (list, Sequence):
        if not isinstance(value, list):
            return False
        return _all_match(value, args[0]) if args else True
    if base in (dict, Mapping):
        if not isinstance(value, dict):
            return False
        return _all_match(list(value.values()), args[1]) if len(args) == 2 else True
    return None


def _all_match(items: list[Any], annotation: Any) -> bool | None:
    results = [_matches(item, annotation) for item in items]
    if any(r is False for r in results):
        return False
    if any(r is None for r in results):
        return None
    return True


def _describe(annotation: Any) -> str:
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _unexpected_keyword(signature: inspect.Signature, kwargs: Mapping[str, Any]) -> str | None:
    """Name a keyword the handler does not take, with the nearest parameter, if any.

    ``Signature.bind`` reports a missing argument before an unknown keyword, so
    ``greet(nom="Ada")`` would be refused for the missing ``name`` and the typo
    that caused it would go unmentioned.
    """
    params = signature.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    by_keyword = [
        p.name
        for p in params.values()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    for key in kwargs:
        if key not in by_keyword:
            near = difflib.get_close_matches(str(key), by_keyword, n=1, cutoff=0.5)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            return f"got an unexpected keyword argument {key!r}{hint}"
    return None


def check_arguments(
    func: Callable[..., Any],
    signature: inspect.Signature,
    hints: Mapping[str, Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    skip_first: bool = False,
) -> None:
    """Raise :class:`MalformedPayload` unless ``args``/``kwargs`` fit ``func``.

    In order: the arguments bind to the signature (a TypeError the worker would
    hit anyway), each one survives JSON unchanged (named by its parameter, so
    the message says which one to change), and each matches a simple
    annotation. ``skip_first`` leaves out a leading parameter the caller fills
    itself (a django.tasks context).
    """
    name = getattr(func, "__qualname__", None) or repr(func)  # repr only when needed
    bind_to = signature
    if skip_first:
        params = list(signature.parameters.values())[1:]
        bind_to = signature.replace(parameters=params)
    try:
        bound = bind_to.bind(*args, **kwargs)
    except TypeError as exc:
        shown = bind_to.replace(
            parameters=[
                p.replace(annotation=hints.get(p.name, p.annotation))
                for p in bind_to.parameters.values()
            ],
            return_annotation=inspect.Signature.empty,
        )
        reason = _unexpected_keyword(bind_to, kwargs) or str(exc)
        raise MalformedPayload(f"the arguments do not fit {name}{shown}: {reason}") from None
    for param_name, value in bound.arguments.items():
        param = bind_to.parameters[param_name]
        annotation = hints.get(param_name, inspect.Parameter.empty)
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            items = [(f"{param_name}[{i}]", v) for i, v in enumerate(value)]
        elif param.kind is inspect.Parameter.VAR_KEYWORD:
            _ensure_keys(value, "keyword argument names")
            items = [(str(k), v) for k, v in value.items()]
        else:
            items = [(param_name, value)]
        for where, item in items:
            if isinstance(item, Decimal) and _takes_float_not_str(annotation):
                # The generic hint (pass a str, rebuild the Decimal) would contradict
                # the handler's own annotation, which then refuses the str.
                raise MalformedPayload(
                    f"argument {where!r} is a Decimal ({_short_repr(item)}), which JSON cannot "
                    f"carry unchanged: {name} takes {_describe(annotation)}, so pass "
                    f"float({where}) (or annotate it str and rebuild it with Decimal(...) "
                    "in the job, to keep every digit)."
                )
            ensure_json(item, where, label="argument ")
            if _matches(item, annotation) is False:
                raise MalformedPayload(
                    f"argument {where!r} of {name} must be {_describe(annotation)}, "
                    f"got {type(item).__name__} {_short_repr(item)}"
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


# --- The plain call: many enqueues of one handler ---------------------------------------

#: What each simple annotation accepts, by exact type of the value (a subclass, an enum
#: say, is left to :func:`check_arguments`, which refuses or accepts it in its words).
_PLAIN_TYPES: dict[Any, frozenset[type]] = {
    inspect.Parameter.empty: frozenset({str, int, float, bool, type(None)}),
    Any: frozenset({str, int, float, bool, type(None)}),
    object: frozenset({str, int, float, bool, type(None)}),
    str: frozenset({str}),
    int: frozenset({int}),
    float: frozenset({int, float}),
    bool: frozenset({bool}),
    None: frozenset({type(None)}),
    type(None): frozenset({type(None)}),
}

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _plain_types(annotation: Any) -> frozenset[type] | None:
    """The exact value types ``annotation`` surely accepts (``X | None`` too), or None."""
    try:
        found = _PLAIN_TYPES.get(annotation)
    except TypeError:  # an unhashable annotation
        return None
    if found is not None:
        return found
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        accepted: set[type] = set()
        for arg in typing.get_args(annotation):
            part = _plain_types(arg)
            if part is None:
                return None
            accepted |= part
        return frozenset(accepted)
    return None


def plain_call_check(
    signature: inspect.Signature, hints: Mapping[str, Any]
) -> Callable[[list[Any]], bool] | None:
    """A quick "surely fits" for positional arguments of plain JSON values, or None.

    :func:`check_arguments` binds the signature, walks each value for JSON and matches
    its annotation: 2.8 ms per 1,000 calls of a handler with one ``str`` parameter, the
    largest cost of a bulk enqueue of such jobs. For a handler whose parameters are all
    positional, each with no annotation or a simple one (``str``, ``int``, ``float``,
    ``bool``, ``Any``, a union of them or ``None``), the returned function says True
    only when ``check_arguments(args, {})`` would accept: the count fits, and each value
    is a ``str`` without NUL or a surrogate, an ``int`` in range, a finite ``float``
    other than -0.0, a ``bool`` or ``None``, of a type its annotation takes. False means
    "not sure": the caller then runs :func:`check_arguments`, which raises in its words.
    """
    params = list(signature.parameters.values())
    if any(param.kind not in _POSITIONAL for param in params):
        return None
    accepted: list[frozenset[type]] = []
    for param in params:
        types_ = _plain_types(hints.get(param.name, inspect.Parameter.empty))
        if types_ is None:
            return None
        accepted.append(types_)
    high = len(params)
    low = sum(1 for param in params if param.default is inspect.Parameter.empty)
    low_int, high_int = _INT_RANGE
    unstorable = _UNSTORABLE_TEXT.search
    isfinite, copysign = math.isfinite, math.copysign

    def fits(args: list[Any]) -> bool:
        if not low <= len(args) <= high:
            return False
        for value, allowed in zip(args, accepted, strict=False):
            kind = type(value)
            if kind not in allowed:
                return False
            if kind is str:
                if unstorable(value):
                    return False
            elif kind is int:
                if not low_int <= value <= high_int:
                    return False
            elif kind is float and (
                not isfinite(value) or (value == 0.0 and copysign(1.0, value) < 0)
            ):
                return False
        return True

    return fits
