"""Deprecated: moved to ``django_arcature.worker.dispatch``; this path goes away in 1.0."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

_TARGET = "django_arcature.worker.dispatch"

warnings.warn(
    f"django_arcature.dispatch moved to {_TARGET} (this path goes away in 1.0).",
    DeprecationWarning,
    stacklevel=2,
)

_target = importlib.import_module(_TARGET)


def __getattr__(name: str) -> Any:
    return getattr(_target, name)
