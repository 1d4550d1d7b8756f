"""One enqueue's two wake-ups (its NOTIFY and its same-host hint) wake a worker once.

``WakePairs`` drops the second of two arrivals from different channels that name
the same backend PID within its window, each arrival pairing at most once; the
hint's datagram carries that PID. These tests drive it with made-up arrivals: the
real race runs in tests/integration/test_wake_pairs.py.
"""

from __future__ import annotations

import pytest

from django_arcature.hints import HINT_CHANNEL, _datagram, hint_pid
from django_arcature.worker.wakeup import LISTEN_CHANNEL, Listener, WakePairs

LISTEN, HINT = LISTEN_CHANNEL, HINT_CHANNEL
#: A window no test here outlasts, so pairing does not depend on the machine's speed.
LONG = 3600.0


@pytest.mark.parametrize("first", [LISTEN, HINT])
def test_the_twin_from_the_other_channel_is_dropped_whichever_comes_first(first: str) -> None:
    pairs = WakePairs(window=LONG)
    second = HINT if first == LISTEN else LISTEN
    assert pairs.first(first, 41)
    assert not pairs.first(second, 41)
    assert pairs.dropped == 1


def test_an_arrival_pairs_only_once() -> None:
    """Two enqueues of one connection: four arrivals, two wake-ups, in any interleaving."""
    pairs = WakePairs(window=LONG)
    woke = [
        pairs.first(channel, 7)
        for channel in (LISTEN, HINT, HINT, LISTEN)  # the second's hint overtook its NOTIFY
    ]
    assert woke == [True, False, True, False]


def test_the_same_channel_never_pairs_with_itself() -> None:
    """Two NOTIFYs of one backend are two transactions: both wake."""
    pairs = WakePairs(window=LONG)
    assert pairs.first(LISTEN, 7)
    assert pairs.first(LISTEN, 7)
    assert pairs.first(HINT, 7) is False  # pairs with the older NOTIFY
    assert pairs.first(HINT, 7) is False  # and this one with the other
    assert pairs.first(HINT, 7) is True  # nothing left to pair with


def test_other_backends_and_unknown_pids_are_never_paired() -> None:
    pairs = WakePairs(window=LONG)
    assert pairs.first(LISTEN, 1)
    assert pairs.first(HINT, 2)
    assert pairs.first(HINT, None)
    assert pairs.first(LISTEN, None)
    assert pairs.dropped == 0


def test_a_twin_later_than_the_window_wakes_again() -> None:
    pairs = WakePairs(window=0.0)
    assert pairs.first(LISTEN, 9)
    assert pairs.first(HINT, 9)  # the NOTIFY is forgotten: a redundant claim, never a lost one


@pytest.mark.parametrize("order", [(LISTEN, HINT), (HINT, LISTEN)])
def test_each_later_transaction_still_wakes_once_after_a_leftover(
    order: tuple[str, str],
) -> None:
    """Hints left unpaired (an old sender: three enqueues in one transaction sent three
    PID hints for one NOTIFY) may swallow one half of the connection's next transactions,
    never both halves of one."""
    pairs = WakePairs(window=LONG)
    assert [pairs.first(c, 5) for c in (LISTEN, HINT, HINT, HINT)] == [True, False, True, True]
    for _ in range(4):
        assert sum(pairs.first(c, 5) for c in order) == 1


def test_unpaired_arrivals_are_bounded() -> None:
    pairs = WakePairs(window=LONG, limit=3)
    for pid in range(10):  # NOTIFYs of enqueuers that send no hint here
        assert pairs.first(LISTEN, pid)
    assert sum(len(kept) for kept in pairs._unpaired.values()) <= 3
    assert pairs._count <= 3


def test_the_listener_hands_a_job_notifications_pid_to_the_pairing() -> None:
    woken: list[str] = []
    pairs = WakePairs(window=LONG)
    listener = Listener.__new__(Listener)
    listener.wake, listener.on_queues, listener.on_cancel = (
        lambda: woken.append("job"),
        lambda: woken.append("queues"),
        None,
    )
    listener.pairs = pairs
    assert pairs.first(HINT, 12)  # the hint came first
    listener._dispatch("", 12)
    listener._dispatch("queues", 12)  # a queue change is never a twin
    listener._dispatch("", 13)
    assert woken == ["queues", "job"]


@pytest.mark.parametrize(
    ("datagram", "pid"),
    [
        (b"!", None),  # an older sender's hint, or one with no NOTIFY beside it
        (b"", None),  # close() waking its own thread
        (b"!123", 123),
        (b"!0", 0),
        (b"!12a", None),
        (b"?123", None),
        (b"!-5", None),
        (b"!" + b"9" * 40, None),  # longer than any PID
        (b"!\xff\xfe", None),
    ],
)
def test_a_hint_datagram_carries_a_pid_or_nothing(datagram: bytes, pid: int | None) -> None:
    assert hint_pid(datagram) == pid


def test_a_hint_datagram_round_trips() -> None:
    assert hint_pid(_datagram(4242)) == 4242
    assert _datagram(None) == b"!"
