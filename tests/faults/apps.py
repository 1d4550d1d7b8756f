"""The fault suite's app: job handlers that produce hostile data, receivers that raise."""

from __future__ import annotations

import os
from typing import Any

from django.apps import AppConfig


class RaisingReceiver(RuntimeError):
    """What a deliberately broken observer raises."""


def _raise(sender: Any, **kwargs: Any) -> None:
    raise RaisingReceiver("a receiver that always fails (fault injection)")


class FaultsConfig(AppConfig):
    name = "tests.faults"
    label = "arcature_faults"

    def ready(self) -> None:
        """Connect a raising receiver to each signal named in ARCATURE_FAULT_RAISING_RECEIVERS.

        Connected before any other receiver of the worker process (apps are ready
        before the worker imports job modules), so a plain ``send`` would never
        reach the receivers after it.
        """
        names = os.environ.get("ARCATURE_FAULT_RAISING_RECEIVERS", "")
        for name in filter(None, (part.strip() for part in names.split(","))):
            connect_raising(name)


def connect_raising(name: str) -> None:
    from django_arcature import signals
    from django_arcature.tasks.compat import task_finished, task_started

    found = {"task_started": task_started, "task_finished": task_finished}.get(name)
    signal = found if found is not None else getattr(signals, name)
    signal.connect(_raise, weak=False, dispatch_uid=f"arcature-faults-raise-{name}")


def disconnect_raising(name: str) -> None:
    from django_arcature import signals
    from django_arcature.tasks.compat import task_finished, task_started

    found = {"task_started": task_started, "task_finished": task_finished}.get(name)
    signal = found if found is not None else getattr(signals, name)
    signal.disconnect(dispatch_uid=f"arcature-faults-raise-{name}")
