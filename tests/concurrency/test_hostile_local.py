"""A hostile local environment: another Unix user plants what our worker will look at.

A second user (``arcature-hostile``, made by the test) plants, before or while our
processes run: the wake-up hint folder, a symbolic link at its path to a folder
of ours, a folder with the wrong owner or mode, files that are not sockets, and
links at the health file's names. Our worker and our enqueues must never follow
a link, never delete or overwrite a file that is not their own socket or health
file, never send a hint where another user can hear it, and either use a safe
path or switch hints off with a WARNING that says what to fix.

Root bypasses permission checks, so most of these run our side as root (the
hardest case: "can I write here" is always yes) and some as a second
unprivileged user (``arcature-owner``), since the checks must be about uid
equality. Needs root (CI is root); locally without root it is skipped, loudly.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import socket
import stat
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from django_arcature.hints import HintReceiver, hint_directory
from django_arcature.models import Job, JobStatus
from django_arcature.worker.health import HealthFile, check
from tests.concurrency.conftest import WorkerProcess, wait_until
from tests.concurrency.local_users import (
    HOSTILE,
    OWNER,
    ensure_user,
    require_root,
    run_as,
    spawn_as,
)

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

StartWorker = Callable[..., WorkerProcess]


@pytest.fixture(scope="module")
def hostile() -> pwd.struct_passwd:
    require_root()
    return ensure_user(HOSTILE)


@pytest.fixture(scope="module")
def owner() -> pwd.struct_passwd:
    require_root()
    return ensure_user(OWNER)


def plant(user: pwd.struct_passwd, code: str) -> None:
    """Run ``code`` as ``user`` (os, socket, stat, json are imported)."""
    assert run_as(user, textwrap.dedent(code) + "\nprint(json.dumps({}))\n") == {"stderr": ""}


class Eavesdropper:
    """A socket of the hostile user's, counting the hints that reach it."""

    def __init__(self, user: pwd.struct_passwd, path: Path) -> None:
        self.path = path
        self.proc = spawn_as(
            user,
            f"""
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            s.bind({str(path)!r})
            os.chmod({str(path)!r}, 0o777)
            print("ready", flush=True)
            got = 0
            while s.recv(64) != b"stop":
                got += 1
            print(json.dumps({{"received": got}}), flush=True)
            """,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line == "ready", self.proc.stderr.read() if self.proc.stderr else line

    def received(self) -> int:
        """Stop it; how many datagrams other than ours reached it."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as stop:
            stop.sendto(b"stop", str(self.path))
        out, _err = self.proc.communicate(timeout=10)
        count: int = json.loads(out.strip().splitlines()[-1])["received"]
        return count


def _dead_socket(path: Path) -> None:
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(str(path))
    dead.close()


def _entries(folder: Path) -> dict[str, int]:
    """Name -> owner uid of each entry (never following links)."""
    return {p.name: os.lstat(p).st_uid for p in folder.iterdir()}


def _run_one_job(worker: WorkerProcess) -> None:
    job = Job.objects.enqueue("tests.add", args=[2, 3])  # commits, then hints
    wait_until(
        lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED,
        timeout=30,
        what=f"the job to run (worker log:\n{worker.log})",
    )


def _stop(worker: WorkerProcess) -> None:
    worker.signal(15)
    assert worker.wait(30) == 0, worker.log


# --- the hint folder, our side as root -------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", [0o777, 0o700])
def test_a_hint_folder_planted_before_we_make_it_is_never_used(
    hostile: pwd.struct_passwd,
    shared: Path,
    start_worker: StartWorker,
    mode: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    leaf = hint_directory("default")
    base = leaf.parent  # shared/arcature-wake-<uid>: a name anybody can predict
    plant(
        hostile,
        f"""
        for folder in ({str(base)!r}, {str(leaf)!r}):
            os.mkdir(folder)
            os.chmod(folder, {mode})
        """,
    )
    spy = Eavesdropper(hostile, leaf / "1-spy.sock")
    worker = start_worker()
    wait_until(lambda: "started" in worker.log, what=f"the worker to start:\n{worker.log}")
    caplog.set_level(logging.WARNING, "django_arcature")
    _run_one_job(worker)  # by polling: the worker has no socket
    assert spy.received() == 0, "an enqueue told another user when it happened"
    assert set(_entries(leaf).values()) == {hostile.pw_uid}, "nothing of ours was put there"
    assert "same-host wake-up hints are off" in worker.log
    assert f"{base} is owned by uid {hostile.pw_uid}, not by uid 0" in worker.log
    assert "Remove it" in worker.log
    assert "hints are not sent" in caplog.text
    _stop(worker)


@pytest.mark.django_db(transaction=True)
def test_a_link_at_the_hint_folders_path_to_a_folder_of_ours_is_never_followed(
    hostile: pwd.struct_passwd, shared: Path, start_worker: StartWorker
) -> None:
    leaf = hint_directory("default")
    ours = shared / "ours"
    ours.mkdir(mode=0o700)
    victim = ours / leaf.name
    victim.mkdir(mode=0o700)
    (victim / "keep.sock").write_text("precious")  # refuses a datagram: it is no socket
    _dead_socket(victim / "other-app.sock")  # refuses one too: nobody reads it
    before = _entries(victim)
    plant(hostile, f"os.symlink({str(ours)!r}, {str(leaf.parent)!r})")
    worker = start_worker()
    wait_until(lambda: "started" in worker.log, what=f"the worker to start:\n{worker.log}")
    _run_one_job(worker)
    assert _entries(victim) == before, "a file of ours was removed, or a socket bound there"
    assert (victim / "keep.sock").read_text() == "precious"
    assert f"{leaf.parent} is a symbolic link" in worker.log
    _stop(worker)


@pytest.mark.django_db(transaction=True)
def test_our_folder_left_open_is_refused_and_what_others_put_in_it_is_left_alone(
    hostile: pwd.struct_passwd, shared: Path, caplog: pytest.LogCaptureFixture
) -> None:
    leaf = hint_directory("default")
    for folder in (leaf.parent, leaf):  # ours, but anybody may put things in them
        folder.mkdir()
        folder.chmod(0o777)
    keep = shared / "keep.txt"
    keep.write_text("precious")
    plant(
        hostile,
        f"""
        open({str(leaf / "2-file.sock")!r}, "w").write("not a socket")
        os.symlink({str(keep)!r}, {str(leaf / "3-link.sock")!r})
        """,
    )
    spy = Eavesdropper(hostile, leaf / "1-spy.sock")
    caplog.set_level(logging.WARNING, "django_arcature")
    receiver = HintReceiver("default", lambda: None)
    started = receiver.start()
    Job.objects.enqueue("tests.add", args=[1, 1])
    receiver.close()
    assert spy.received() == 0
    planted = ("1-spy.sock", "2-file.sock", "3-link.sock")
    assert _entries(leaf) == dict.fromkeys(planted, hostile.pw_uid)
    assert keep.read_text() == "precious"
    assert not started
    assert f"{leaf.parent} has mode 0777, open to other users" in caplog.text
    assert f"chmod 700 {leaf.parent}" in caplog.text


# --- the health file, our side as root ---------------------------------------------------


def _secret(shared: Path) -> Path:
    """A file only root may read or write: what a planted link aims at."""
    folder = shared / "private"
    folder.mkdir(mode=0o700)
    secret = folder / "secret.txt"
    secret.write_text("precious")
    secret.chmod(0o600)
    return secret


def test_a_link_at_the_health_files_old_temporary_name_is_not_followed(
    hostile: pwd.struct_passwd, shared: Path
) -> None:
    secret = _secret(shared)
    target = shared / "health.json"
    plant(
        hostile, f"os.symlink({str(secret)!r}, {str(shared / f'.health.json.{os.getpid()}.tmp')!r})"
    )
    health = HealthFile(target, "w1", 1.0)
    health.beat("ok")
    assert secret.read_text() == "precious", "the worker wrote through the planted link"
    assert stat.S_ISREG(os.lstat(target).st_mode)
    assert os.lstat(target).st_uid == 0
    assert check(target).healthy


@pytest.mark.django_db(transaction=True)
def test_a_worker_replaces_a_link_at_its_health_file_and_never_writes_through_it(
    hostile: pwd.struct_passwd, shared: Path, start_worker: StartWorker
) -> None:
    secret = _secret(shared)
    target = shared / "health.json"
    # The link at the file itself, and links at the temporary names the next pids
    # would have used (``.health.json.<pid>.tmp``): a guess, as an attacker's would be.
    plant(
        hostile,
        f"""
        os.symlink({str(secret)!r}, {str(target)!r})
        start = int(open("/proc/loadavg").read().split()[-1])
        for pid in range(start, start + 400):
            os.symlink({str(secret)!r}, {str(shared)!r} + f"/.health.json.{{pid}}.tmp")
        """,
    )
    worker = start_worker("--burst", "--health-file", str(target))
    assert worker.wait(60) == 0, worker.log
    assert secret.read_text() == "precious", "the worker wrote through a planted link"
    assert stat.S_ISREG(os.lstat(target).st_mode)
    assert json.loads(target.read_text())["state"] == "stopped"


# --- our side as an unprivileged user ------------------------------------------------------

_HINTS_AS_OWNER = """
woken = threading.Event()
receiver = hints.HintReceiver("default", woken.set)
started = receiver.start()
sent = hints.send_hints("default")
result = {"started": started, "sent": sent, "woken": woken.wait(5) if sent else False,
          "folder": str(receiver.directory)}
if started:
    info = os.lstat(receiver.directory.parent)
    result.update(uid=info.st_uid, mode=stat.S_IMODE(info.st_mode))
receiver.close()
print(json.dumps(result))
"""


def test_an_unprivileged_worker_gets_a_folder_only_it_can_enter(
    owner: pwd.struct_passwd, hostile: pwd.struct_passwd, shared: Path
) -> None:
    env = {"TMPDIR": str(shared)}
    found = run_as(owner, _HINTS_AS_OWNER, django=True, env=env)
    assert found["started"], found["stderr"]
    assert found["sent"] == 1
    assert found["woken"]
    assert found["uid"] == owner.pw_uid
    assert found["mode"] == 0o700
    base = shared / f"arcature-wake-{owner.pw_uid}"
    assert Path(found["folder"]).parent == base
    denied = run_as(
        hostile,
        f"""
        try:
            os.listdir({str(base)!r})
            print(json.dumps("listed"))
        except PermissionError:
            print(json.dumps("denied"))
        """,
    )
    assert denied == "denied"


@pytest.mark.parametrize("planter", ["hostile", "root"])
def test_an_unprivileged_worker_refuses_a_folder_it_could_write_but_does_not_own(
    owner: pwd.struct_passwd, hostile: pwd.struct_passwd, shared: Path, planter: str
) -> None:
    # Mode 0777: the owner could bind and list there. Ownership, not access, decides.
    base = shared / f"arcature-wake-{owner.pw_uid}"
    code = f"os.mkdir({str(base)!r}); os.chmod({str(base)!r}, 0o777)"
    if planter == "hostile":
        plant(hostile, code)
        uid = hostile.pw_uid
    else:
        base.mkdir()
        base.chmod(0o777)
        uid = 0
    found = run_as(owner, _HINTS_AS_OWNER, django=True, env={"TMPDIR": str(shared)})
    assert not found["started"]
    assert found["sent"] == 0
    assert f"{base} is owned by uid {uid}, not by uid {owner.pw_uid}" in found["stderr"]
    assert "hints are off" in found["stderr"]
    assert os.listdir(base) == [], "the owner put nothing in a folder it does not own"


def test_an_unprivileged_worker_fails_clearly_on_a_planted_health_link(
    owner: pwd.struct_passwd, hostile: pwd.struct_passwd, shared: Path
) -> None:
    mine = shared / "owner-data.txt"
    mine.write_text("precious")
    os.chown(mine, owner.pw_uid, owner.pw_gid)
    mine.chmod(0o600)
    target = shared / "health.json"
    plant(hostile, f"os.symlink({str(mine)!r}, {str(target)!r})")
    found = run_as(
        owner,
        f"""
        try:
            health.HealthFile({str(target)!r}, "w1", 1.0)
            print(json.dumps({{"error": None}}))
        except health.HealthFileError as exc:
            print(json.dumps({{"error": str(exc)}}))
        """,
        django=True,
    )
    # In a sticky folder only the link's owner may replace it: the worker says so
    # at startup, and never writes through the link.
    assert found["error"] is not None
    assert f"cannot write the health file {target}" in found["error"]
    assert mine.read_text() == "precious"
    assert os.path.islink(target)
    assert [p.name for p in shared.iterdir() if p.name.startswith(".health")] == []


_WORKER_AS_OWNER = """
from django.core.management import call_command
from django_arcature.management.commands import arcature_worker  # noqa: F401
connections["default"].ensure_connection()
connections["default"].close()
"""


@pytest.mark.only_on(
    "postgresql", "mysql", reason="an unprivileged process cannot write root's SQLite file"
)
@pytest.mark.django_db(transaction=True)
def test_an_unprivileged_worker_runs_jobs_with_its_own_private_hint_folder(
    owner: pwd.struct_passwd, shared: Path
) -> None:
    job = Job.objects.enqueue("tests.add", args=[2, 3])
    found = run_as(
        owner,
        """
        call_command("arcature_worker", "--burst", "-v", "2", "--no-listen")
        base = os.path.join(os.environ["TMPDIR"], f"arcature-wake-{os.getuid()}")
        info = os.lstat(base)
        print(json.dumps({"uid": info.st_uid, "mode": stat.S_IMODE(info.st_mode)}))
        """,
        django=True,
        env={"TMPDIR": str(shared)},
        imports=_WORKER_AS_OWNER,
    )
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED, found["stderr"]
    assert "started" in found["stderr"], "the worker's log is read"
    assert "hints are off" not in found["stderr"]
    assert found["uid"] == owner.pw_uid
    assert found["mode"] == 0o700
