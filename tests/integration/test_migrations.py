"""The migrations match the models and run both ways on every database."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.db import connection

from django_arcature.models import Job

TABLE = Job._meta.db_table
CONSTRAINTS = {c.name for c in Job._meta.constraints}


@pytest.mark.django_db
def test_models_have_no_missing_migrations() -> None:
    out = io.StringIO()
    # Exits with status 1 (SystemExit) when a model change has no migration.
    call_command("makemigrations", "django_arcature", check=True, dry_run=True, stdout=out)
    assert "No changes detected" in out.getvalue()


def _schema() -> tuple[bool, set[str]]:
    with connection.cursor() as cursor:
        if TABLE not in connection.introspection.table_names(cursor):
            return False, set()
        return True, set(connection.introspection.get_constraints(cursor, TABLE))


@pytest.mark.django_db(transaction=True)
def test_migrate_to_zero_and_back() -> None:
    exists, names = _schema()
    assert exists
    assert names >= CONSTRAINTS, f"missing in the database: {CONSTRAINTS - names}"
    try:
        call_command("migrate", "django_arcature", "zero", verbosity=0)
        assert _schema() == (False, set())
    finally:
        call_command("migrate", "django_arcature", verbosity=0)
    exists, names = _schema()
    assert exists
    assert names >= CONSTRAINTS
    # The table works again, constraints and all.
    Job.objects.enqueue("tests.noop")
    assert len(Job.objects.claim("w", lease=30, batch=1)) == 1


@pytest.mark.only_on("postgresql", reason="LISTEN/NOTIFY and its trigger exist there only")
@pytest.mark.django_db(transaction=True)
def test_postgresql_insert_trigger_is_recreated() -> None:

    def triggers() -> list[str]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal",
                [TABLE],
            )
            return [name for (name,) in cursor.fetchall()]

    every = ["arcature_notify_cancelled", "arcature_notify_finished", "arcature_notify_inserted"]
    assert sorted(triggers()) == every
    try:
        call_command("migrate", "django_arcature", "0001", verbosity=0)
        assert triggers() == []
    finally:
        call_command("migrate", "django_arcature", verbosity=0)
    assert sorted(triggers()) == every


@pytest.mark.only_on("postgresql", reason="the wait and cancel triggers exist there only")
@pytest.mark.django_db(transaction=True)
def test_postgresql_finish_notify_migration_both_ways() -> None:
    """0013 adds the waiters' mark and its two triggers; reversed, neither is left."""

    def state() -> tuple[list[str], bool]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal",
                [TABLE],
            )
            names = sorted(name for (name,) in cursor.fetchall())
            cursor.execute(
                "SELECT 1 FROM information_schema.columns "
                "WHERE table_name = %s AND column_name = 'arcature_waited'",
                [TABLE],
            )
            return names, cursor.fetchone() is not None

    assert state() == (
        ["arcature_notify_cancelled", "arcature_notify_finished", "arcature_notify_inserted"],
        True,
    )
    try:
        call_command("migrate", "django_arcature", "0012", verbosity=0)
        assert state() == (["arcature_notify_inserted"], False)
    finally:
        call_command("migrate", "django_arcature", verbosity=0)
    assert state()[1] is True


@pytest.mark.only_on("postgresql", reason="table storage options are PostgreSQL's (0008)")
@pytest.mark.django_db(transaction=True)
def test_postgresql_storage_options_and_sweep_index_both_ways() -> None:
    """0008 sets the fillfactor and autovacuum options and drops the lease from the sweep
    index; reversed, the table has the server's defaults and 0005's index again."""

    def storage() -> tuple[set[str], str]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", [TABLE])
            (options,) = cursor.fetchone()
            cursor.execute(
                "SELECT indexdef FROM pg_indexes WHERE indexname = 'arcature_sweep_idx'", []
            )
            (sweep,) = cursor.fetchone()
        return set(options or []), sweep.split(" USING btree ")[1]

    options, sweep = storage()
    assert options == {
        "fillfactor=90",
        "autovacuum_vacuum_threshold=1000",
        "autovacuum_vacuum_scale_factor=0.01",
        "autovacuum_analyze_threshold=1000",
        "autovacuum_analyze_scale_factor=0.01",
        "autovacuum_vacuum_insert_threshold=10000",
        "autovacuum_vacuum_insert_scale_factor=0.01",
    }
    assert sweep == "(id) WHERE ((status)::text = 'running'::text)"
    try:
        call_command("migrate", "django_arcature", "0007", verbosity=0)
        assert storage() == (set(), "(lease_expires_at) WHERE ((status)::text = 'running'::text)")
    finally:
        call_command("migrate", "django_arcature", verbosity=0)
    assert storage() == (options, sweep)
    # The sweep still finds an expired lease through the rebuilt index.
    Job.objects.enqueue("tests.noop")
    (claimed,) = Job.objects.claim("w", lease=1, batch=1)
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {TABLE} SET lease_expires_at = locked_at - interval '1 second'")
    assert Job.objects.sweep_expired_leases() == 1
    assert Job.objects.get(id=claimed.id).status == "pending"


@pytest.mark.django_db(transaction=True)
def test_open_edge_counts_are_counted_for_the_nodes_waiting_at_the_upgrade() -> None:
    """0020 counts each waiting node's open edges: stored ``open`` with a live upstream.

    Before 0020 a completion wrote its fan-in edges ``met`` (D's edge from A, below);
    since, it leaves them stored open and its status says it (Z's edge from X). Both
    are decided, neither is counted; the edges from upstreams still live are. The
    dependents are then released by their last upstream's completion, as any other.
    """
    from django_arcature import Workflow
    from django_arcature.workflows.models import EdgeState, WorkflowEdge, WorkflowNode
    from tests.integration.test_workflows import succeed
    from tests.testapp import workflow_jobs as wf

    flow = Workflow("upgraded")
    a, b, x, y = (flow.add(wf.step, name) for name in "abxy")
    d = flow.add(wf.step, "d", after=[a, b])
    z = flow.add(wf.step, "z", after=[x, y])
    flow.enqueue()
    succeed(a.job_id)
    succeed(x.job_id)
    try:
        call_command("migrate", "django_arcature", "0019", verbosity=0)
        WorkflowEdge.objects.filter(upstream_id=a.job_id).update(state=EdgeState.MET)
    finally:
        call_command("migrate", "django_arcature", verbosity=0)
    counts = dict(WorkflowNode.objects.values_list("job_id", "open_upstreams"))
    assert (counts[d.job_id], counts[z.job_id]) == (1, 1)
    assert {counts[n.job_id] for n in (a, b, x, y)} == {0}
    succeed(b.job_id)
    succeed(y.job_id)
    assert set(
        Job.objects.filter(id__in=[d.job_id, z.job_id]).values_list("status", flat=True)
    ) == {"pending"}
