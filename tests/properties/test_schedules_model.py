"""A stateful model of schedules: random programs of operator edits and worker ticks (issue 19, C).

Hypothesis writes programs of: declaring schedules (cron expression, IANA zone,
missed-slot policy), advancing the database's clock (by seconds to days, from
instants just before daylight-saving changes in Europe/Paris and
America/New_York), worker ticks by two workers, *split* ticks (a worker reads
and decides, other steps happen, then it writes: the race of two workers or of
a worker and an operator), disabling and re-enabling, admin edits of the
expression and zone (also with a worker tick between the admin reading the row
and saving it, issue 19 B7), and the admin's "run now".

Everything runs the real code: ``ScheduleRunner.plan``/``fire`` (what
``tick`` does), the admin's ``get_object``/form/``save_model`` and actions, and
``Schedule.objects.enable``/``disable``. The only seam is the instant: the
runner is handed "now" instead of reading the database's clock, so a program
can walk through days and DST changes in a second (production reads the
database's clock in ``tick``). The app server's clock is skewed by up to three
hours during every tick and admin step, and nothing may depend on it.

An in-memory model says which slots are due. It does not use
``schedules.cron``: slots come from walking UTC minutes and matching the wall
clock of the zone (a wall time that repeats fires at its first occurrence, one
skipped by the clock springing forward fires where the clock lands), and the
window of a schedule starts at the later of its watermark, its creation and its
last re-enable (disabled time is not missed time). After every step:

* every fired (schedule, slot) is one job, never two, and exactly the model's;
* the rows' watermarks and flags are the model's;
* "run now" made exactly one extra job each time, outside the slots.

Profiles: a few seconds per database in CI; ``ARCATURE_SOAK=1`` (``make
soak-schedules-model``) runs far longer programs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.contrib.admin.sites import site
from django.contrib.auth.models import User
from django.contrib.messages.storage.fallback import FallbackStorage
from django.http import HttpRequest
from django.test import RequestFactory
from django.utils import timezone
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from django_arcature.models import Job
from django_arcature.schedules.firing import Fired, Planned, ScheduleRunner
from django_arcature.schedules.keys import PREFIX, slot_key
from django_arcature.schedules.models import Schedule
from django_arcature.schedules.periodic import forget, periodic
from django_arcature.schedules.sync import sync_code_schedules
from tests.properties.conftest import PROFILE, TALLY
from tests.testapp.jobs import noop

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.django_db(transaction=True)]

TALLY_NAME = "schedules model"
MINUTE = timedelta(minutes=1)
ZONES = ("UTC", "Europe/Paris", "America/New_York")
#: Expressions whose slots fall in and around the hours that DST moves.
CRONS = (
    "*/20 * * * *",
    "0 * * * *",
    "30 2 * * *",
    "30 1 * * *",
    "0,30 1-3 * * *",
    "15 */6 * * *",
)
#: A few hours before a DST change: Paris spring/autumn 2024, New York spring/autumn 2024.
STARTS = (
    datetime(2024, 3, 30, 21, 0, 7, tzinfo=UTC),
    datetime(2024, 10, 26, 21, 0, 7, tzinfo=UTC),
    datetime(2024, 3, 10, 3, 0, 7, tzinfo=UTC),
    datetime(2024, 11, 3, 2, 0, 7, tzinfo=UTC),
)
POLICIES = ("latest", "all", "skip")
ON_TIME = timedelta(seconds=60)


# --- the model's own cron: minute and hour fields, every day ----------------------------------


def _field(text: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        step = 1
        if "/" in part:
            part, step_text = part.split("/")
            step = int(step_text)
        if part == "*":
            first, last = low, high
        elif "-" in part:
            first, last = (int(x) for x in part.split("-"))
        else:
            first = last = int(part)
        values.update(range(first, last + 1, step))
    return frozenset(values)


@dataclass(frozen=True)
class Expression:
    minutes: frozenset[int]
    hours: frozenset[int]

    @classmethod
    def parse(cls, cron: str) -> Expression:
        minute, hour, *rest = cron.split()
        assert rest == ["*", "*", "*"], cron
        return cls(_field(minute, 0, 59), _field(hour, 0, 23))

    def matches(self, wall: datetime) -> bool:
        return wall.minute in self.minutes and wall.hour in self.hours


def _wall(instant: datetime, tz: ZoneInfo) -> datetime:
    return instant.astimezone(tz).replace(tzinfo=None)


def model_slots(cron: str, tz_name: str, after: datetime, until: datetime) -> list[datetime]:
    """Slot instants in ``(after, until]``, ascending, by walking UTC minutes.

    A slot is the UTC minute at which the wall clock first reaches a matching
    wall time: the high-water mark of the wall clock makes a repeated hour fire
    nothing the second time, and a jump forward fires once, where it lands, if
    any wall time it skipped (or landed on) matches.
    """
    expression = Expression.parse(cron)
    tz = ZoneInfo(tz_name)
    start = after.astimezone(UTC).replace(second=0, microsecond=0)
    # The highest wall time already reached by ``start`` (the clock goes back by an hour at most).
    high = max(_wall(start - k * MINUTE, tz) for k in range(62))
    slots: list[datetime] = []
    instant = start + MINUTE
    while instant <= until:
        wall = _wall(instant, tz)
        if wall > high:
            probe = high + MINUTE
            while probe <= wall:
                if expression.matches(probe):
                    slots.append(instant)
                    break
                probe += MINUTE
            high = wall
        instant += MINUTE
    return [slot for slot in slots if slot > after]


# --- the model ----------------------------------------------------------------------------------


@dataclass
class ModelSchedule:
    name: str
    cron: str
    tz: str
    missed: str
    catch_up: int
    created: datetime
    enabled: bool = True
    enabled_at: datetime | None = None
    watermark: datetime | None = None

    def deciding(self) -> tuple[Any, ...]:
        """What a compare-and-set compares (and ``enabled``)."""
        return (
            self.enabled,
            self.watermark,
            self.enabled_at,
            self.cron,
            self.tz,
            self.missed,
            self.catch_up,
        )

    def due(self, now: datetime) -> tuple[list[datetime], datetime | None]:
        """(slots to fire, new watermark) if evaluated at ``now``."""
        start = self.watermark or self.created
        if self.enabled_at is not None and self.enabled_at > start:
            start = self.enabled_at
        slots = model_slots(self.cron, self.tz, start, now)
        if not slots:
            return [], None
        newest = slots[-1]
        if self.missed == "all":
            return slots[-self.catch_up :], newest
        if self.missed == "skip" and now - newest > ON_TIME:
            return [], newest
        return [newest], newest


@dataclass
class PendingTick:
    """A worker that has read and decided, and not written yet."""

    plan: list[Planned]
    now: datetime
    decided: dict[str, tuple[tuple[Any, ...], list[datetime], datetime | None]] = field(
        default_factory=dict
    )


def admin_request(user: User) -> HttpRequest:
    request = RequestFactory().post("/admin/")
    request.user = user
    request.session = {}  # type: ignore[assignment]
    request._messages = FallbackStorage(request)  # type: ignore[attr-defined]
    return request


@contextmanager
def app_clock(skew: timedelta) -> Iterator[None]:
    """The app server's clock off by ``skew`` (the package must not read it for slots)."""
    real_now = timezone.now
    timezone.now = lambda: real_now() + skew
    try:
        yield
    finally:
        timezone.now = real_now


CODE_NAME = "model-code"

SKEWS = st.sampled_from(
    [timedelta(0), timedelta(hours=3), timedelta(hours=-3), timedelta(seconds=-59)]
)


class SchedulesModel(RuleBasedStateMachine):
    schedules = Bundle("schedules")

    def __init__(self) -> None:
        super().__init__()
        Job.objects.all().delete()
        Schedule.objects.all().delete()
        self.user, _ = User.objects.get_or_create(
            username="model-admin", defaults={"is_staff": True, "is_superuser": True}
        )
        self.admin = site._registry[Schedule]
        self.now = STARTS[0]
        self.started = False
        self.model: dict[str, ModelSchedule] = {}
        self.expected: set[tuple[str, datetime]] = set()
        self.fired: list[Fired] = []
        self.runs_now = 0
        self.workers = [ScheduleRunner("default"), ScheduleRunner("default")]
        self.pending: dict[int, PendingTick] = {}
        TALLY.setdefault(TALLY_NAME, Counter())["examples"] += 1

    # --- clock --------------------------------------------------------------------------

    @precondition(lambda self: not self.started)
    @rule(start=st.sampled_from(STARTS))
    def choose_start(self, start: datetime) -> None:
        self.now = start
        self.started = True

    @rule(
        seconds=st.one_of(
            st.integers(1, 120), st.integers(121, 3 * 3600), st.integers(3 * 3600, 2 * 86400)
        )
    )
    def advance(self, seconds: int) -> None:
        self.started = True
        self.now += timedelta(seconds=seconds, microseconds=seconds * 997 % 1_000_000)

    # --- operators ------------------------------------------------------------------------

    @precondition(lambda self: len(self.model) < 3)
    @rule(
        target=schedules,
        cron=st.sampled_from(CRONS),
        tz=st.sampled_from(ZONES),
        missed=st.sampled_from(POLICIES),
        catch_up=st.integers(1, 4),
        enabled=st.booleans(),
    )
    def declare(self, cron: str, tz: str, missed: str, catch_up: int, enabled: bool) -> str:
        name = f"s{len(self.model)}"
        Schedule.objects.create(
            name=name,
            task_name="tests.noop",
            cron=cron,
            timezone=tz,
            missed=missed,
            catch_up=catch_up,
            enabled=enabled,
            created_at=self.now,
        )
        self.model[name] = ModelSchedule(name, cron, tz, missed, catch_up, self.now, enabled)
        return name

    @rule(
        target=schedules,
        cron=st.sampled_from(CRONS),
        tz=st.sampled_from(ZONES),
        missed=st.sampled_from(POLICIES),
        catch_up=st.integers(1, 4),
    )
    def declare_in_code(self, cron: str, tz: str, missed: str, catch_up: int) -> str:
        """``@periodic`` and a worker's sync; declaring it again edits it (a deploy)."""
        forget(CODE_NAME)
        periodic(cron, timezone=tz, missed=missed, catch_up=catch_up, name=CODE_NAME)(noop)
        sync_code_schedules("default", now=self.now)
        item = self.model.get(CODE_NAME)
        if item is None:
            self.model[CODE_NAME] = ModelSchedule(CODE_NAME, cron, tz, missed, catch_up, self.now)
        else:
            item.cron, item.tz, item.missed, item.catch_up = cron, tz, missed, catch_up
        return CODE_NAME

    def teardown(self) -> None:
        forget(CODE_NAME)

    @rule(name=schedules)
    def disable(self, name: str) -> None:
        Schedule.objects.filter(name=name).disable()
        self.model[name].enabled = False

    @rule(name=schedules)
    def enable(self, name: str) -> None:
        Schedule.objects.filter(name=name).enable(at=self.now)
        item = self.model[name]
        if not item.enabled:
            item.enabled = True
            item.enabled_at = self.now

    @rule(
        name=schedules,
        cron=st.sampled_from(CRONS),
        tz=st.sampled_from(ZONES),
        worker_between=st.booleans(),
        skew=SKEWS,
    )
    def admin_edit(
        self, name: str, cron: str, tz: str, worker_between: bool, skew: timedelta
    ) -> None:
        """The change form saved; with ``worker_between``, a worker fires after the admin
        read the row and before it saved (what a save of every column would undo)."""
        request = admin_request(self.user)
        with app_clock(skew):
            obj = self.admin.get_object(request, str(Schedule.objects.get(name=name).pk))
            assert obj is not None
            if worker_between:
                self._tick(0, skew)
            form_class = self.admin.get_form(request, obj, change=True)
            initial = form_class(instance=obj).initial
            data = {
                key: ("" if value is None else value)
                for key, value in initial.items()
                if key in form_class.base_fields and key != "enabled"
            }
            data.update(args="[]", kwargs="{}", cron=cron, timezone=tz)
            if obj.enabled:
                data["enabled"] = "on"
            form = form_class(data, instance=obj)
            assert form.is_valid(), form.errors
            self.admin.save_model(request, form.save(commit=False), form, change=True)
        if "cron" in form.fields:  # a code schedule's expression and zone are read-only
            item = self.model[name]
            item.cron, item.tz = cron, tz

    @rule(name=schedules, skew=SKEWS)
    def run_now(self, name: str, skew: timedelta) -> None:
        with app_clock(skew):
            self.admin.run_schedules_now(  # type: ignore[attr-defined]
                admin_request(self.user), Schedule.objects.filter(name=name)
            )
        self.runs_now += 1

    # --- workers ------------------------------------------------------------------------

    def _apply(self, name: str, slots: list[datetime], watermark: datetime | None) -> None:
        if watermark is None:
            return
        self.model[name].watermark = watermark
        for slot in slots:
            assert (name, slot) not in self.expected, f"the model fired {name} {slot} twice"
            self.expected.add((name, slot))

    def _tick(self, worker: int, skew: timedelta) -> None:
        runner = self.workers[worker]
        with app_clock(skew):
            fired = runner.fire(runner.plan(self.now), self.now)
        self.fired += fired
        TALLY[TALLY_NAME]["slots"] += len(fired)
        for item in self.model.values():
            if item.enabled:
                self._apply(item.name, *item.due(self.now))

    @rule(worker=st.sampled_from([0, 1]), skew=SKEWS)
    def tick(self, worker: int, skew: timedelta) -> None:
        if worker in self.pending:
            self.commit(worker, skew)
        self._tick(worker, skew)

    @precondition(lambda self: len(self.pending) < 2)
    @rule(worker=st.sampled_from([0, 1]), skew=SKEWS)
    def decide(self, worker: int, skew: timedelta) -> None:
        """A worker reads and decides now; it writes at a later step (``commit``)."""
        if worker in self.pending:
            return
        with app_clock(skew):
            plan = self.workers[worker].plan(self.now)
        pending = PendingTick(plan, self.now)
        for item in self.model.values():
            if item.enabled:
                pending.decided[item.name] = (item.deciding(), *item.due(self.now))
        self.pending[worker] = pending

    @precondition(lambda self: bool(self.pending))
    @rule(worker=st.sampled_from([0, 1]), skew=SKEWS)
    def commit(self, worker: int, skew: timedelta) -> None:
        pending = self.pending.pop(worker, None)
        if pending is None:
            return
        with app_clock(skew):
            fired = self.workers[worker].fire(pending.plan, pending.now)
        self.fired += fired
        TALLY[TALLY_NAME]["slots"] += len(fired)
        for name, (deciding, slots, watermark) in pending.decided.items():
            if self.model[name].deciding() == deciding:  # nothing changed since it read
                self._apply(name, slots, watermark)

    # --- checks -------------------------------------------------------------------------

    @invariant()
    def one_job_per_due_slot(self) -> None:
        TALLY[TALLY_NAME]["steps"] += 1
        seen = Counter((item.schedule, item.slot) for item in self.fired)
        twice = [key for key, count in seen.items() if count > 1]
        assert not twice, f"fired twice: {twice}"
        missing, extra = self.expected - set(seen), set(seen) - self.expected
        assert not missing, f"missing {sorted(missing)}"
        assert not extra, f"extra {sorted(extra)}"
        keys = Counter(
            Job.objects.filter(unique_key__startswith=PREFIX).values_list("unique_key", flat=True)
        )
        assert keys == Counter(slot_key(name, slot) for name, slot in self.expected)
        assert Job.objects.filter(unique_key__isnull=True).count() == self.runs_now

    @invariant()
    def rows_agree(self) -> None:
        rows = {row.name: row for row in Schedule.objects.all()}
        assert set(rows) == set(self.model)
        for name, item in self.model.items():
            row = rows[name]
            assert (row.enabled, row.cron, row.timezone) == (item.enabled, item.cron, item.tz)
            assert row.last_slot_at == item.watermark
            assert row.enabled_at == item.enabled_at


def test_schedules_behave_like_their_model() -> None:
    """Random programs of edits and ticks fire exactly the model's slots, once each."""
    soak = PROFILE == "soak"
    before = Counter(TALLY.get(TALLY_NAME, Counter()))
    run_state_machine_as_test(
        SchedulesModel,
        settings=settings(
            max_examples=400 if soak else 25,
            stateful_step_count=80 if soak else 30,
        ),
    )
    after = TALLY[TALLY_NAME]
    assert after["examples"] > before["examples"]
    assert after["steps"] > before["steps"]


# --- the model's cron, checked on the instants where DST moves the clock -------------------------


@pytest.mark.parametrize(
    ("cron", "zone", "after", "expected"),
    [
        # Paris springs forward at 01:00 UTC (02:00 -> 03:00): 02:30 fires at 03:00 local.
        ("30 2 * * *", "Europe/Paris", datetime(2024, 3, 30, 23, tzinfo=UTC), ["2024-03-31 01:00"]),
        # Paris falls back at 01:00 UTC (03:00 -> 02:00): 02:30 fires once, the first time.
        (
            "30 2 * * *",
            "Europe/Paris",
            datetime(2024, 10, 26, 23, tzinfo=UTC),
            ["2024-10-27 00:30"],
        ),
        # New York falls back at 06:00 UTC (02:00 -> 01:00): 01:30 once, at 05:30 UTC.
        (
            "30 1 * * *",
            "America/New_York",
            datetime(2024, 11, 3, 2, tzinfo=UTC),
            ["2024-11-03 05:30"],
        ),
    ],
)
def test_the_models_own_cron_follows_the_dst_rules(
    cron: str, zone: str, after: datetime, expected: list[str]
) -> None:
    slots = model_slots(cron, zone, after, after + timedelta(hours=6))
    assert [slot.strftime("%Y-%m-%d %H:%M") for slot in slots] == expected
