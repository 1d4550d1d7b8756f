"""The unique key a slot's job carries: derived from (schedule, slot instant)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

__all__ = ["slot_key"]

PREFIX = "arcature:schedule:"
KEY_MAX_LENGTH = 255


def slot_key(schedule_name: str, slot: datetime) -> str:
    """``arcature:schedule:<name>@<UTC instant>``; hashed when the name makes it too long.

    The instant is written in UTC to the microsecond, so the same slot gives the
    same key on every host whatever its zone, and two slots never share one.
    """
    instant = slot.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    key = f"{PREFIX}{schedule_name}@{instant}"
    if len(key) <= KEY_MAX_LENGTH:
        return key
    digest = hashlib.sha256(schedule_name.encode()).hexdigest()[:32]
    return f"{PREFIX}sha256:{digest}@{instant}"
