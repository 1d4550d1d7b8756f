"""The interface every database driver implements, and how a connection finds its driver.

The manager speaks to the database through one small interface: the claim,
the batched fenced completion, the bulk insert, the clock and "was that a
lock conflict". Each vendor implements it in its own module
(``postgresql``, ``mysql``, ``sqlite``), so a vendor's quirks are read in one
place and a new vendor is one new file. Drivers register themselves by their
Django ``connection.vendor`` when their module is imported; the package's
``__init__`` imports them all.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, ClassVar

from django.db import connections

from .claimed import ClaimedJob

if TYPE_CHECKING:
    from django_arcature.manager.bulk_rows import BulkRows

#: ``(job_id, claim_token, fields)`` for one row of a batched fenced completion.
CompletionRow = tuple[uuid.UUID, uuid.UUID, dict[str, Any]]

#: The tables that say which jobs are workflow or batch members, unquoted: (node table,
#: its job id column, workflow run table). A member's completion settles something.
MemberTable = tuple[str, str, str]

#: What settling a member's completion needs of its node, read by the completion's own
#: statement where it can: (job id, has dependents, batch id, workflow id, the
#: workflow's node count).
MemberRow = tuple[uuid.UUID, bool, uuid.UUID | None, uuid.UUID | None, int | None]

#: Given a claim-token value (or SQL expression), the fields of the claimed transition.
ClaimedFields = Callable[[Any], dict[str, Any]]

_DRIVERS: dict[str, type[Driver]] = {}


class Driver:
    """One database vendor's way of doing the manager's few vendor-specific steps."""

    #: Django's ``connection.vendor`` this driver serves.
    vendor: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.vendor:
            _DRIVERS[cls.vendor] = cls

    def __init__(self, using: str) -> None:
        self.using = using

    @property
    def connection(self) -> Any:
        return connections[self.using]

    # --- the clock ----------------------------------------------------------------

    @classmethod
    def now_sql(cls, seconds: float = 0) -> str:
        """SQL for "now + seconds" on the database's clock, in UTC."""
        raise NotImplementedError

    @classmethod
    def now_plus_sql(cls, seconds_sql: str) -> str:
        """SQL for "now + the seconds in ``seconds_sql``" (a column or placeholder):
        a batch of retries, each with its own backoff, on the database's clock."""
        raise NotImplementedError

    # --- errors ---------------------------------------------------------------------

    @classmethod
    def is_lock_conflict(cls, exc: BaseException) -> bool:
        """True when ``exc`` means "try again shortly", not "this is wrong"."""
        return False

    # --- the claim ------------------------------------------------------------------

    def claim(
        self,
        model: Any,
        worker_id: str,
        lease_seconds: int,
        batch: int,
        queues: Sequence[str] | None,
        claimed_fields: ClaimedFields,
        exclude: Sequence[str] = (),
    ) -> list[ClaimedJob]:
        """Take up to ``batch`` available pending jobs, highest priority then oldest first.

        ``queues`` restricts the claim to those queues; ``exclude`` leaves these
        out (paused, ``--exclude-queue`` and fleet-limited queues: ``queues.gate``).

        Each gets ``attempts + 1``, a fresh random claim token and a lease on the
        database's clock (``claimed_fields`` builds those fields where the driver
        goes through the ORM). Concurrent claimers never receive the same job.
        """
        raise NotImplementedError

    # --- batched fenced completions -----------------------------------------------------

    #: Rows per statement, well under every driver's parameter limit.
    BATCH_COMPLETION_ROWS: ClassVar[int] = 500

    def packet_limit(self) -> int | None:
        """The largest statement the server takes, in bytes (None: no limit near ours)."""
        return None

    def supports_batch_completion(self) -> bool:
        return False

    def fences_by_join(self) -> bool:
        """Whether every fenced write, even of one job, goes through :meth:`complete_batch`.

        Where the fence's ``status = 'running'`` is compared with a constant, a planner
        that trusts statistics taken while nothing ran (PostgreSQL's) may reach the row
        through a status index and walk every running row; joined to a ``VALUES`` row
        that carries the status, the row is found by primary key. False where one plain
        ``UPDATE`` per job is as good (MySQL/MariaDB estimate from the index itself).
        """
        return False

    def complete_batch(self, model: Any, rows: Sequence[CompletionRow]) -> set[uuid.UUID]:
        """Apply one named transition to many jobs; return the ids it changed.

        Every row carries the same field names. The fence is kept row by row:
        a row changes only on its own id *and* token while ``status =
        'running'``. Must run inside a transaction.
        """
        raise NotImplementedError

    def complete_batch_members(
        self, model: Any, rows: Sequence[CompletionRow], members: MemberTable
    ) -> tuple[set[uuid.UUID], dict[uuid.UUID, MemberRow] | None]:
        """:meth:`complete_batch`, and which changed jobs have a row in ``members``,
        with that row (``MemberRow``), or None where the statement cannot say: the
        caller then looks them up itself. Lets a batch of plain jobs skip that
        look-up, and a batch of members settle without reading its nodes again."""
        return self.complete_batch(model, rows), None

    def completes_plain_alone(self) -> bool:
        """Whether :meth:`complete_plain` exists: one autocommit statement for a flush."""
        return False

    def complete_plain(
        self, model: Any, rows: Sequence[CompletionRow], members: MemberTable
    ) -> tuple[set[uuid.UUID], set[uuid.UUID]]:
        """:meth:`complete_batch` for the rows whose jobs have no row in ``members``, as
        one statement that needs no transaction around it; returns (the ids it changed,
        the ids it left alone because they are members).

        Why: a member's completion must settle its dependents in its own transaction,
        but a plain job's is a single statement, atomic by itself. Written outside
        ``BEGIN`` … ``COMMIT``, a flush of plain jobs costs one round trip instead of
        three. The caller writes the members it is handed back in a transaction.
        """
        raise NotImplementedError

    # --- unique keys ----------------------------------------------------------------------

    def one_inserter_per_key(self, key: str) -> AbstractContextManager[None]:
        """Hold off other enqueues of ``key`` on this database while one tries its INSERT.

        Nothing is needed where the unique index's waiters cannot deadlock each other.
        """
        return nullcontext()

    # --- bulk insert --------------------------------------------------------------------

    def insert_rows(
        self, model: Any, objs: Sequence[Any], varying: Collection[str], batch_size: int
    ) -> None:
        """Insert unsaved rows in as few statements as the database allows (in a transaction)."""
        raise NotImplementedError

    def streams_in_one_statement(self, bulk: BulkRows) -> bool:
        """Whether :meth:`stream_rows` writes ``bulk``'s rows in a single statement, which
        is all or nothing by itself: the caller then needs no transaction around it when
        it has none of its own. False here: :meth:`insert_rows` may take several."""
        return False

    def stream_rows(self, model: Any, bulk: BulkRows, batch_size: int) -> list[Any]:
        """Insert the rows of one bulk enqueue (in a transaction); return their instances.

        Here the instances are made first and inserted by :meth:`insert_rows`; a
        driver that can send rows while it makes them (PostgreSQL's COPY) overrides this.
        """
        rows = bulk.all()
        self.insert_rows(model, rows, bulk.varying, batch_size)
        for row in rows:  # as bulk_create leaves them: saved, and on this database
            row._state.adding = False
            row._state.db = self.using
        return rows

    # --- planner estimates ---------------------------------------------------------------

    def estimate_rows(self, sql: str, params: Sequence[Any]) -> int | None:
        """The planner's guess at how many rows ``sql`` returns; None where there is none."""
        return None


def driver_class(vendor: str) -> type[Driver]:
    try:
        return _DRIVERS[vendor]
    except KeyError:
        raise NotImplementedError(
            f"django-arcature does not support the {vendor!r} database"
        ) from None


def driver_for(using: str) -> Driver:
    """The driver for the database alias ``using``."""
    return driver_class(connections[using].vendor)(using)
