"""Fenced completions: running → succeeded, pending (retry) or dead, only under the claim.

Every completion — one ``mark_*`` call or the worker's batch — goes through
:meth:`CompletionWrites.write_completions`, which keeps three promises:

- **A refusal stays with its row.** A value the database (or its driver) refuses
  fails the batch's statement; the batch is then written row by row, each under
  its own savepoint, and a refused row is replaced by a ``dead`` write saying what
  could not be stored (``transitions.refused_completion``). The other rows land;
  the worker never retries a batch that can never be written.
- **Keyed by claim.** Outcomes are decided per (job id, claim token): a stale and a
  fresh claim of one job in the same batch are told apart (a statement never
  carries one job twice).
- **A lost acknowledgement is not a lost claim.** A row the fence turned away is
  read back: if it holds this claim's marker in its attempt log, the write landed
  earlier (its COMMIT went through but the connection broke before the answer
  came back), so it is reported as landed, and its event is sent now, once.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import DataError, IntegrityError, connections, transaction

from django_arcature import signals
from django_arcature.conf import ArcatureSettings, get_settings
from django_arcature.db import Driver, driver_for
from django_arcature.db import retry_on_lock_conflict as _retry_on_lock_conflict
from django_arcature.db.base import MemberRow, MemberTable
from django_arcature.db.budget import (
    CHUNK_TARGET_BYTES,
    ROW_OVERHEAD_BYTES,
    STATEMENT_OVERHEAD_BYTES,
    row_bytes,
    statement_budget,
)
from django_arcature.states import JobStatus
from django_arcature.transitions import (
    ClaimTransition,
    Completion,
    Written,
    announce,
    refused_completion,
    shrunk_completion,
    transition_fields_sized,
    wrote_claim,
)

from .base import JobWriter
from .dependencies import settle_completions

logger = logging.getLogger(__name__)

#: What "the database refused this row's data" looks like, as opposed to "the database
#: is unreachable" (OperationalError, InterfaceError), which the caller retries:
#: constraint and data errors from the server, and the encoding errors drivers raise
#: in Python before anything is sent.
DATA_ERRORS: tuple[type[BaseException], ...] = (
    DataError,
    IntegrityError,
    ValueError,
    TypeError,
    OverflowError,
    RecursionError,
)

ClaimKey = tuple[uuid.UUID, uuid.UUID]


#: A row whose values are surely under this many bytes is not measured exactly.
_SURELY_SMALL_BYTES = 64 * 1024
#: A character of a value's text takes at most this many bytes in a statement
#: (an emoji as JSON ``\\ud83d\\ude00``, each backslash escaped once more).
_BYTES_PER_CHAR = 14
#: How many times a row over the budget is cut smaller before its result is refused.
_SHRINK_STEPS = 6


@dataclass(frozen=True)
class _Prepared:
    completion: Completion
    fields: dict[str, Any]
    #: At most how many bytes this row adds to a statement (``db.budget``).
    size: int = 0

    @classmethod
    def of(cls, completion: Completion, conf: ArcatureSettings | None = None) -> _Prepared:
        fields, chars = transition_fields_sized(completion, conf)
        size = chars * _BYTES_PER_CHAR + ROW_OVERHEAD_BYTES + 1024
        if size > _SURELY_SMALL_BYTES:
            size = row_bytes(fields)
        return cls(completion, fields, size)

    @property
    def key(self) -> ClaimKey:
        return (self.completion.job_id, self.completion.claim_token)


class CompletionWrites(JobWriter):
    """Each completion is a named transition applied through the fence."""

    def mark_succeeded(
        self,
        job_id: uuid.UUID,
        claim_token: uuid.UUID,
        result: Any = None,
        *,
        attempt_log: list[Any] | None = None,
    ) -> ClaimTransition:
        """running → succeeded, only under this claim."""
        completion = Completion(
            job_id, claim_token, "succeeded", result=result, attempt_log=attempt_log
        )
        return self._write_one(completion)

    def mark_retry(
        self,
        job_id: uuid.UUID,
        claim_token: uuid.UUID,
        available_at: datetime,
        message: str,
        *,
        traceback: str = "",
        attempt_log: list[Any] | None = None,
    ) -> ClaimTransition:
        """running → pending (claimable again at ``available_at``), only under this claim."""
        completion = Completion(
            job_id,
            claim_token,
            "retry",
            available_at=available_at,
            message=message,
            traceback=traceback,
            attempt_log=attempt_log,
        )
        return self._write_one(completion)

    def mark_dead(
        self,
        job_id: uuid.UUID,
        claim_token: uuid.UUID,
        error_kind: str,
        message: str,
        *,
        traceback: str = "",
        attempt_log: list[Any] | None = None,
    ) -> ClaimTransition:
        """running → dead with a kind and a reason, only under this claim."""
        completion = Completion(
            job_id,
            claim_token,
            "dead",
            error_kind=str(error_kind),
            message=message,
            traceback=traceback,
            attempt_log=attempt_log,
        )
        return self._write_one(completion)

    def _write_one(self, completion: Completion) -> ClaimTransition:
        return self.write_completions([completion], batched=False)[0].outcome

    def complete_many(self, completions: Sequence[Completion]) -> list[ClaimTransition]:
        """Apply many fenced completions in one transaction (one commit for a batch).

        Each row is still fenced on its own id and token, and each gets its own
        UPDATED/LOST; observer events are sent after the commit. A row whose data
        the database refuses ends ``dead`` instead (UPDATED, with ``job_dead``).
        """
        return [written.outcome for written in self.write_completions(completions, batched=False)]

    def complete_batch(self, completions: Sequence[Completion]) -> list[ClaimTransition]:
        """Like :meth:`complete_many`, in one UPDATE per transition where the database can.

        Same fields (``transition_fields``), same per-row fence on id, token and
        ``status = 'running'``, same events after the commit; on PostgreSQL and
        SQLite each group of same-kind completions is a single ``UPDATE … FROM
        (VALUES …) RETURNING id`` instead of one statement per job, on
        MySQL/MariaDB a locked ``UPDATE … JOIN``.
        """
        return [written.outcome for written in self.write_completions(completions)]

    def write_completions(
        self,
        completions: Sequence[Completion],
        *,
        batched: bool = True,
        plain_alone: bool = False,
    ) -> list[Written]:
        """Write fenced completions in one transaction; what became of each, in order.

        ``plain_alone`` (the worker's flush) lets the jobs that are no workflow or
        batch member be written by one statement of their own, in autocommit, before
        the members' transaction (``Driver.complete_plain``): each completion is still
        atomic with what it settles, but the batch is no longer one transaction.

        ``Written.completion`` is the completion that was written: the one given,
        or the ``dead`` one that replaced it when its data could not be stored.
        Events are sent after the commit, one per completion, through
        ``send_event`` (a raising receiver is logged, never raised). A database
        that cannot be reached raises, and nothing is sent: calling again with
        the same completions is safe, and reports writes that had landed as such.
        """
        if not completions:
            return []
        conf = get_settings()  # once per batch: reading it costs more than a row's fields
        budget = statement_budget(self.db) - STATEMENT_OVERHEAD_BYTES
        prepared = [
            self._fit(self._prepare(completion, conf), budget, conf) for completion in completions
        ]
        driver = driver_for(self.db)
        # One statement per row where the database does as well that way; where a
        # plain fenced UPDATE risks a bad plan (``fences_by_join``), even one row
        # goes through the driver's joined statement, which reaches it by primary key.
        single = not driver.supports_batch_completion() or (
            not batched and not driver.fences_by_join()
        )
        landed: set[ClaimKey] = set()
        rest: Sequence[_Prepared] = prepared
        try:
            if (
                plain_alone
                and not single
                and not _members_last.get(self.db)
                and self._plain_fits(driver, prepared)
            ):
                done, rest = _retry_on_lock_conflict(
                    self.db, lambda: self._write_plain(driver, prepared)
                )
                landed |= done
                # Every row a member (a wide fan-out's nodes): the next flush goes
                # straight to the members' transaction (``_members_last``).
                _members_last[self.db] = not done and len(rest) == len(prepared)
            if rest:
                landed |= _retry_on_lock_conflict(
                    self.db, lambda: self._write(rest, single, watch=plain_alone)
                )
        except DATA_ERRORS as exc:
            logger.warning(
                "the database refused a batch of %d completion(s) (%s); writing them "
                "one by one to find the refused row",
                len(rest),
                _first_line(exc),
            )
            isolated, isolated_landed = _retry_on_lock_conflict(
                self.db, lambda: self._write_isolated(rest)
            )
            landed |= isolated_landed
            prepared = _replaced(prepared, rest, isolated)
        written = [
            Written(
                ClaimTransition.UPDATED if item.key in landed else ClaimTransition.LOST,
                item.completion,
            )
            for item in prepared
        ]
        written = self._recognise_landed(written)
        if _observed(self.model):
            for item in written:
                announce(self.model, item.completion, item.outcome)
        return written

    def _prepare(self, completion: Completion, conf: ArcatureSettings) -> _Prepared:
        """The completion's fields; a value that can never be stored becomes a dead write."""
        try:
            return _Prepared.of(completion, conf)
        except DATA_ERRORS as exc:
            if not _is_unstorable(exc):
                raise  # a caller's mistake (unknown kind, retry without a time): say so
            replacement = refused_completion(completion, _first_line(exc))
            return _Prepared.of(replacement)

    def _fit(self, item: _Prepared, budget: int, conf: ArcatureSettings) -> _Prepared:
        """``item``, or a smaller version of it when its row would not fit in one statement.

        A statement over the server's packet limit is not refused with an error on
        MariaDB/MySQL: the server drops the connection, so the write would be retried
        for ever. The row is cut here instead (``shrunk_completion``), before anything
        is sent; a result that cannot fit ends the job ``dead`` with the reason.
        """
        if item.size <= budget:
            return item
        original = item
        for step in range(1, _SHRINK_STEPS + 1):
            item = self._prepare(shrunk_completion(original.completion, budget, step), conf)
            if item.size <= budget:
                break
        else:
            reason = (
                f"its row takes {original.size} bytes as sent, over the {budget} bytes one "
                "statement may carry (the server's max_allowed_packet, or 15 MiB)"
            )
            item = self._prepare(refused_completion(original.completion, reason), conf)
            if item.size > budget:
                item = _Prepared.of(dataclasses.replace(item.completion, attempt_log=None))
        logger.error(
            "job %s: its %s took %d bytes, over the statement budget of %d; stored %s "
            "of %d bytes instead",
            original.completion.job_id,
            original.completion.kind,
            original.size,
            budget,
            "cut" if item.completion.kind == original.completion.kind else "as dead",
            item.size,
        )
        return item

    def _plain_fits(self, driver: Driver, prepared: Sequence[_Prepared]) -> bool:
        """Whether the batch may go as :meth:`Driver.complete_plain`'s one statement.

        Only in autocommit (inside a caller's transaction a failed statement would
        abort it, where a savepoint lets the refused row be found), only where one
        statement carries the whole batch (one transition's fields, no job twice,
        within the rows and bytes a chunk of :meth:`_write` takes): the usual flush.
        """
        if not driver.completes_plain_alone():
            return False
        connection = connections[self.db]
        if connection.in_atomic_block or not connection.get_autocommit():
            return False
        names = tuple(prepared[0].fields)
        if any(tuple(item.fields) != names for item in prepared):
            return False
        max_bytes = min(CHUNK_TARGET_BYTES, statement_budget(self.db) - STATEMENT_OVERHEAD_BYTES)
        return (
            len(prepared) <= driver.BATCH_COMPLETION_ROWS
            and sum(item.size for item in prepared) <= max_bytes
            and len({item.key[0] for item in prepared}) == len(prepared)
        )

    def _write_plain(
        self, driver: Driver, prepared: Sequence[_Prepared]
    ) -> tuple[set[ClaimKey], list[_Prepared]]:
        """The plain jobs' rows in one autocommit statement; (their landed claims, the
        members handed back for :meth:`_write`'s transaction, which settles them).

        A crash between the two writes leaves the members ``running`` under their
        claims: their leases bring them back, and they run again (at least once),
        their dependents still settled once, by the completion that lands.
        """
        rows = [(i.completion.job_id, i.completion.claim_token, i.fields) for i in prepared]
        changed, held = driver.complete_plain(self.model, rows, _member_table())
        landed = {item.key for item in prepared if item.key[0] in changed}
        return landed, [item for item in prepared if item.key[0] in held]

    def _write(
        self, prepared: Sequence[_Prepared], single: bool, *, watch: bool = False
    ) -> set[ClaimKey]:
        """All of ``prepared`` in one transaction; the claims whose rows changed.

        ``watch`` (a flush that could have gone ``plain_alone``): a landed job that
        is no member sends the next flush through :meth:`_write_plain` again.
        """
        landed: set[ClaimKey] = set()
        with transaction.atomic(using=self.db):
            if single:
                for item in prepared:
                    completion = item.completion
                    fenced = self._fenced(completion.job_id, completion.claim_token)
                    if fenced.update(**item.fields):
                        landed.add(item.key)
                self._settle_dependents(prepared, landed)
                return landed
            driver = driver_for(self.db)
            groups: dict[tuple[str, ...], list[_Prepared]] = {}
            for item in prepared:
                groups.setdefault(tuple(item.fields), []).append(item)
            max_bytes = min(
                CHUNK_TARGET_BYTES, statement_budget(self.db) - STATEMENT_OVERHEAD_BYTES
            )
            # Which landed jobs are workflow or batch members, with their node rows,
            # where the driver's statement can say (None: it cannot, so every landed
            # job is looked up).
            members: dict[uuid.UUID, MemberRow] | None = {}
            for items in groups.values():
                for chunk in _distinct_jobs(items, driver.BATCH_COMPLETION_ROWS, max_bytes):
                    rows = [
                        (i.completion.job_id, i.completion.claim_token, i.fields) for i in chunk
                    ]
                    changed, in_chunk = driver.complete_batch_members(
                        self.model, rows, _member_table()
                    )
                    landed.update(item.key for item in chunk if item.key[0] in changed)
                    if members is not None and in_chunk is not None:
                        members.update(in_chunk)
                    else:
                        members = None
            self._settle_dependents(prepared, landed, members)
        if watch and (members is None or any(key[0] not in members for key in landed)):
            _members_last[self.db] = False
        return landed

    def _settle_dependents(
        self,
        prepared: Sequence[_Prepared],
        landed: set[ClaimKey],
        members: Mapping[uuid.UUID, MemberRow] | None = None,
    ) -> None:
        """Workflow hook: release or cancel what waited on the landed completions, in
        this transaction (``manager.dependencies``). A fenced-out write releases nothing.

        ``members``, when the completion's own statement said which landed jobs are
        workflow or batch members (with their node rows), limits the hook to those:
        with none (a batch of plain jobs, the usual drain) it costs no statement at
        all, and with some it settles them without reading their nodes again.
        """
        finished = [
            (item.key[0], item.completion.kind)
            for item in prepared
            if item.key in landed and (members is None or item.key[0] in members)
        ]
        if finished:
            settle_completions(self.db, self.model, finished, members)

    def _write_isolated(
        self, prepared: Sequence[_Prepared]
    ) -> tuple[list[_Prepared], set[ClaimKey]]:
        """Row by row under savepoints, in one transaction; refused rows replaced by dead."""
        written: list[_Prepared] = []
        landed: set[ClaimKey] = set()
        with transaction.atomic(using=self.db):
            for item in prepared:
                try:
                    if self._write_row(item):
                        landed.add(item.key)
                    written.append(item)
                    continue
                except DATA_ERRORS as exc:
                    reason = _first_line(exc)
                    logger.error(
                        "job %s: the database refused its %s (%s); it ends dead instead",
                        item.completion.job_id,
                        item.completion.kind,
                        reason,
                    )
                replacement = refused_completion(item.completion, reason)
                instead = _Prepared.of(replacement)
                try:
                    changed = self._write_row(instead)
                except DATA_ERRORS:  # even the history is refused: keep the one before
                    bare = dataclasses.replace(replacement, attempt_log=None)
                    instead = _Prepared.of(bare)
                    changed = self._write_row(instead)
                if changed:
                    landed.add(instead.key)
                written.append(instead)
            self._settle_dependents(written, landed)
        return written, landed

    def _write_row(self, item: _Prepared) -> bool:
        """One row under its own savepoint, through the same statement as a batch would."""
        completion = item.completion
        driver = driver_for(self.db)
        with transaction.atomic(using=self.db):
            if driver.supports_batch_completion() and driver.fences_by_join():
                row = (completion.job_id, completion.claim_token, item.fields)
                return completion.job_id in driver.complete_batch(self.model, [row])
            fenced = self._fenced(completion.job_id, completion.claim_token)
            return bool(fenced.update(**item.fields))

    def _recognise_landed(self, written: list[Written]) -> list[Written]:
        """Fenced-out rows whose own write had landed (its acknowledgement lost) are UPDATED.

        Only this claim's completion writes this claim's token into the attempt
        log, and tokens are never reused, so the marker is proof; a row without
        it was changed by someone else (cancelled, swept, re-claimed).
        """
        lost = [
            index
            for index, item in enumerate(written)
            if item.outcome is ClaimTransition.LOST and item.completion.attempt_log is not None
        ]
        if not lost:
            return written
        ids = {written[index].completion.job_id for index in lost}
        stored = {
            job_id: (status, error_kind, last_error, log)
            for job_id, status, error_kind, last_error, log in self.using(self.db)
            .filter(id__in=ids)
            .values_list("id", "status", "error_kind", "last_error", "attempt_log")
        }
        result = list(written)
        for index in lost:
            completion = written[index].completion
            row = stored.get(completion.job_id)
            if row is None or not wrote_claim(row[3], completion.claim_token):
                continue
            status, error_kind, last_error, log = row
            landed = completion
            ours_last = wrote_claim(log[-1:], completion.claim_token)
            if ours_last and status == JobStatus.DEAD and completion.kind != "dead":
                # The refused-data replacement is what landed before the connection broke.
                landed = Completion(
                    completion.job_id,
                    completion.claim_token,
                    "dead",
                    error_kind=error_kind,
                    message=last_error,
                    attempt_log=log,
                )
            logger.warning(
                "job %s: its %s had landed although the database's answer was lost",
                completion.job_id,
                landed.kind,
            )
            result[index] = Written(ClaimTransition.UPDATED, landed)
        return result


#: Per database alias: whether the last flush offered to :meth:`CompletionWrites._write_plain`
#: held only workflow or batch members. Its autocommit statement then wrote nothing
#: and only named them, at a cost (a JSON parse and a member probe per row, about 2 ms
#: a flush of 50 on PostgreSQL, measured) the members' own transaction repeats; so
#: the flushes after it skip it until one of them lands a job that is no member. A
#: hint only: either path writes every row, fenced, with what it settles.
_members_last: dict[str, bool] = {}


@functools.cache
def _member_table() -> MemberTable:
    """The workflow node table, its job id column and the workflow run table: a job
    with a row in the first is a workflow's or a batch's member, whose completion
    has dependents to settle (the run holds its workflow's node count)."""
    from django_arcature.workflows.models import WorkflowNode, WorkflowRun

    column = WorkflowNode._meta.get_field("job_id").column
    assert column is not None  # a concrete field
    return WorkflowNode._meta.db_table, column, WorkflowRun._meta.db_table


def _replaced(
    prepared: Sequence[_Prepared], part: Sequence[_Prepared], instead: Sequence[_Prepared]
) -> list[_Prepared]:
    """``prepared`` with the items of ``part`` (a subsequence of it) replaced, in order,
    by those of ``instead`` (what :meth:`CompletionWrites._write_isolated` wrote)."""
    replacement = {id(old): new for old, new in zip(part, instead, strict=True)}
    return [replacement.get(id(item), item) for item in prepared]


def _observed(model: type[Any]) -> bool:
    """Whether any receiver listens to a completion's events (checked once a batch, not
    once a row: a worker without metrics or tracing has none)."""
    return any(
        signal.has_listeners(model)
        for signal in (
            signals.job_succeeded,
            signals.job_retried,
            signals.job_dead,
            signals.job_claim_lost,
        )
    )


def _distinct_jobs(
    items: Sequence[_Prepared], size: int, max_bytes: int = CHUNK_TARGET_BYTES
) -> Iterator[list[_Prepared]]:
    """Chunks of at most ``size`` rows and about ``max_bytes``, no job twice in one.

    A driver reports the ids its statement changed; with one job twice in a
    statement (a stale and a fresh claim), the id could not say which claim's
    row changed. The second claim goes in a later chunk instead. A chunk always
    takes at least one row, however large.
    """
    # The usual flush: one chunk, unless the same job is in it twice.
    if (
        len(items) <= size
        and sum(item.size for item in items) <= max_bytes
        and len({item.completion.job_id for item in items}) == len(items)
    ):
        yield list(items)
        return
    pending = [(item, item.size) for item in items]
    while pending:
        chunk: list[_Prepared] = []
        seen: set[uuid.UUID] = set()
        used = 0
        rest: list[tuple[_Prepared, int]] = []
        for item, weight in pending:
            fits = not chunk or (len(chunk) < size and used + weight <= max_bytes)
            if fits and item.key[0] not in seen:
                chunk.append(item)
                seen.add(item.key[0])
                used += weight
            else:
                rest.append((item, weight))
        yield chunk
        pending = rest


def _is_unstorable(exc: BaseException) -> bool:
    from django_arcature.core.text import UnstorableValue

    return isinstance(exc, UnstorableValue)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    summary = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {summary}" if summary else type(exc).__name__
