"""The LISTEN connection checks that notifications reach it, and says so when they do not.

Directly on PostgreSQL the probe arrives and the worker waits for NOTIFY.
Behind PgBouncer in transaction mode (the ``py313-dj61-pgbouncer`` tox
environment, ARCATURE_PGBOUNCER=1) LISTEN succeeds but never delivers: the
probe is lost, the listener says why and the worker polls; a LISTEN_DATABASE
alias that bypasses the pooler brings the instant wake-up back.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
from django.test import override_settings

from django_arcature.worker.wakeup import Listener

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.only_on("postgresql", reason="LISTEN/NOTIFY exist there only"),
]


def _probe_outcome(using: str = "default") -> Listener:
    woken = threading.Event()
    listener = Listener(using, woken.set)
    listener.start()
    try:
        deadline = time.monotonic() + 10
        while listener.delivers is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if listener.delivers:
            assert woken.wait(5), "a listening worker looks for jobs at once"
            deadline = time.monotonic() + 5
            while not listener.listening and time.monotonic() < deadline:
                time.sleep(0.02)
            assert listener.listening
    finally:
        listener.close()
    return listener


@pytest.mark.pgbouncer(False, reason="the probe arrives on a direct connection")
def test_probe_arrives_on_a_direct_connection() -> None:
    assert _probe_outcome().delivers is True


@pytest.mark.pgbouncer(True, reason="transaction pooling loses the probe")
def test_probe_is_lost_behind_a_transaction_pooler(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="django_arcature.worker.wakeup")
    listener = _probe_outcome()
    assert listener.delivers is False
    assert not listener.listening
    assert "does not receive notifications" in caplog.text
    assert "LISTEN_DATABASE" in caplog.text


@pytest.mark.pgbouncer(True, reason="transaction pooling loses the probe")
def test_a_direct_listen_alias_restores_the_wake_up() -> None:
    with override_settings(ARCATURE={"LISTEN_DATABASE": "direct"}):
        listener = _probe_outcome()
    assert listener.listen_using == "direct"
    assert listener.delivers is True
