"""Why a PostgreSQL claim may commit without waiting for its WAL flush, and when it does.

On an idle queue the claim's commit is most of the pickup: the ``UPDATE …
RETURNING`` itself takes a fraction of a millisecond, its commit waits for an
fsync of the WAL (1-2 ms on ordinary disks). That wait buys nothing a queue
needs, because a claim that a server crash loses is a state the queue already
handles:

* The job goes back to what the disk last held, ``pending`` with its old
  ``attempts``: another worker claims it again, exactly as after a worker killed
  mid-job (at-least-once, the contract every job already has).
* The stale worker cannot write over the new claim: every completion, retry and
  heartbeat is fenced on ``(id, status = 'running', claim_token)``, and the lost
  claim's token was never durable, so its writes match zero rows.
* Nothing durable can be built on a lost claim: WAL is flushed in order, so any
  synchronous commit after the claim (the job's completion, the handler's own
  writes, anyone's write to this server) flushes the claim's commit record
  with it. Only a claim after which nothing was flushed can be lost, and
  ``wal_writer_delay`` bounds that window (three times 200 ms at the defaults).
* PostgreSQL never corrupts data with ``synchronous_commit = off``: a crash loses
  whole transactions at the tail of the WAL, never part of one.

``set_config('synchronous_commit', 'off', true)`` is local to the claim's
transaction, so it ends with it (safe behind PgBouncer in transaction mode, and
never leaks into the connection's next statement). It is evaluated inside the
claim statement, so it costs no round trip. Only a claim the driver runs in
autocommit is relaxed: inside a transaction (a limited queue's gate, or a
caller's own ``atomic``) the setting would also make the other writes of that
transaction asynchronous, which is not this module's to decide.

``ARCATURE["DURABLE_CLAIMS"] = True`` keeps every claim's commit synchronous.
Heartbeats stay synchronous: one per job every third of a lease is not on the
pickup path, and a renewal lost in a crash could let the sweep hand a job that is
still running to a second worker before the first one learns it lost the claim.
Completions stay synchronous: they are what the queue promises to keep.
"""

from __future__ import annotations

from typing import Any

from django_arcature.conf import get_settings

#: The claim's ``UPDATE … FROM``: a one-row subquery PostgreSQL cannot
#: flatten (its target list is volatile), so it runs once, within the statement.
RELAX_COMMIT_FROM = "(SELECT set_config('synchronous_commit', 'off', true)) AS relaxed_commit"


def relax_claim_commit(connection: Any) -> str:
    """The ``also_from`` for this claim: the relaxed commit, or nothing.

    Nothing when claims are configured durable, or when the claim runs inside a
    transaction whose other writes it would make asynchronous too.
    """
    if connection.in_atomic_block or get_settings().durable_claims:
        return ""
    return RELAX_COMMIT_FROM
