"""The deployment guide's recipes, run and checked as the guide writes them.

docs/howto/deploy.md ships a systemd unit template with a health-check
service and timer, a Dockerfile and a Kubernetes Deployment. There is no
systemd as PID 1, no Docker daemon and no cluster here, so the tests do what
can be done for real, on the recipes read out of the page (deploy_recipes.py):

- each recipe's worker command runs as a real worker process on the test
  database, with only the interpreter, ``manage.py`` (``-m django`` with the test
  settings) and the health-file path replaced: every flag and value is the
  guide's. The recipe's own probe command passes against it, keeps passing while
  it stops, and the recipe's stop signal stops it with exit status 0 well within
  the recipe's stop budget, the job it was running finished. The container
  recipes' workers run as PID 1 of a PID namespace of their own (``unshare``) and
  are signalled from outside it, as a container runtime does; a control shows
  that the shell-form CMD the guide warns against would never see SIGTERM;
- after SIGKILL the probes fail once ``--max-age`` has passed, and the systemd
  health service's whole script then asks systemctl for a ``try-restart``;
- the rules the guide states hold on the recipes themselves (exec-form CMD,
  SIGTERM, stop budgets above the shutdown timeout, every flag accepted by the
  real commands' parsers, a Deployment of a valid shape, a probe that fits its
  timeout without loading Django);
- ``systemd-analyze verify`` accepts the unit files. It needs no systemd running
  as PID 1: it loads the files into a manager of its own, in this process, and
  reports bad syntax, unknown keys and values and missing executables (not users
  or working directories); a control shows it failing the units as written,
  whose virtualenv does not exist here.

The checks that only read the page run on the SQLite environments alone: the
database cannot change their outcome.
"""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import connection

from django_arcature.conf import ArcatureSettings, get_settings
from django_arcature.management.commands.arcature_health import Command as HealthCommand
from django_arcature.management.commands.arcature_worker import Command as WorkerCommand
from django_arcature.models import Job, JobStatus
from django_arcature.worker.health import HealthFile, add_probe_arguments
from tests.concurrency.conftest import REPO, WorkerProcess, wait_started, wait_until
from tests.concurrency.deploy_recipes import (
    PROBE_MODULE,
    PYTHONS,
    RECIPES,
    Recipe,
    compose_grace_seconds,
    dockerfile_value,
    exec_argv,
    exec_form,
    fences,
    health_script_probe,
    unit,
    unit_text,
    unit_value,
    worker_container,
    yaml_document,
)
from tests.concurrency.test_health_probe import record, wait_for_state
from tests.conftest import IN_CI

StartWorker = Callable[..., WorkerProcess]

READS_THE_GUIDE = pytest.mark.only_on(
    "sqlite", reason="reads the deployment guide only: the database cannot change the outcome"
)

#: The job running when the stop signal comes: long enough for a probe to run while
#: the worker is stopping, short enough to finish inside any recipe's shutdown timeout.
JOB_SECONDS = 1.0
#: How much longer than that job a clean stop may take (a loop pass, the last writes).
STOP_SLACK = 5.0
#: The doc's probes allow 60 s; waiting that long after a SIGKILL is too long for CI,
#: so the kill test runs the same commands with this --max-age instead.
SHORT_MAX_AGE = "1"
#: How long after SIGTERM the shell-form control wants to see the worker's loop still "ok".
SHELL_FORM_WATCH_SECONDS = 1.0

UNITS = ("arcature-worker@.service", "arcature-health@.service", "arcature-health@.timer")


def replace_value(words: list[str], flag: str, value: str) -> list[str]:
    """``words`` with the value after ``flag`` replaced (the flag must be there)."""
    assert flag in words, f"{flag} missing from {words}"
    at = words.index(flag) + 1
    return [*words[:at], value, *words[at + 1 :]]


def runnable_worker(recipe: Recipe, health_file: Path) -> list[str]:
    """The recipe's worker command with this interpreter, ``-m django`` and a tmp path."""
    interpreter, script, command, *options = recipe.worker
    assert interpreter in PYTHONS, recipe.worker
    assert (script, command) == ("manage.py", "arcature_worker"), recipe.worker
    return [
        sys.executable,
        "-m",
        "django",
        command,
        *replace_value(options, "--health-file", str(health_file)),
    ]


def runnable_probe(recipe: Recipe, health_file: Path, max_age: str | None = None) -> list[str]:
    """The recipe's probe command with this interpreter and the worker's tmp path."""
    interpreter, dash_m, module, path, *options = recipe.probe
    assert interpreter in PYTHONS, recipe.probe
    assert (dash_m, module) == ("-m", PROBE_MODULE), recipe.probe
    assert path == recipe.flag("--health-file"), "the probe reads another file than the worker's"
    if max_age is not None:
        options = replace_value(options, "--max-age", max_age)
    return [sys.executable, dash_m, module, str(health_file), *options]


def probe_env(**extra: str) -> dict[str, str]:
    """No settings module, no database: the probe must need neither (PYTHONPATH stands
    for the package installed in the image or virtualenv)."""
    env = {
        k: v for k, v in os.environ.items() if k not in {"DJANGO_SETTINGS_MODULE", "DATABASE_URL"}
    }
    return {**env, "PYTHONPATH": str(REPO), **extra}


def run(command: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    # From "/": the health service has no WorkingDirectory=, a probe no project folder.
    return subprocess.run(
        command, cwd="/", env=probe_env(**env), capture_output=True, text=True, timeout=30
    )


def effective_shutdown_timeout(recipe: Recipe) -> float:
    """The recipe's --shutdown-timeout, else the worker's built-in default."""
    given = recipe.flag("--shutdown-timeout")
    return float(given) if given is not None else ArcatureSettings().shutdown_timeout


# --- the recipes, run -------------------------------------------------------------------


@pytest.mark.parametrize("name", list(RECIPES))
@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_recipe_worker_passes_its_probe_and_stops_cleanly_on_its_signal(
    name: str, start_worker: StartWorker, events: Path, tmp_path: Path
) -> None:
    recipe = RECIPES[name]()
    # The run stands for the recipe only if the test settings keep the built-in default.
    assert get_settings().shutdown_timeout == ArcatureSettings().shutdown_timeout
    health = tmp_path / "health.json"
    command = runnable_worker(recipe, health)
    if recipe.pid1:
        require_pid_namespaces()
        command = in_pid_namespace(command)
    worker = start_worker(command=command)
    wait_for_state(health, "ok", worker)
    # A container's runtime signals its PID 1 from outside the container's PID namespace.
    worker_pid = namespace_init(worker) if recipe.pid1 else worker.proc.pid
    assert record(health)["pid"] == (1 if recipe.pid1 else worker.proc.pid)
    alive = run(runnable_probe(recipe, health))
    assert alive.returncode == 0, alive.stdout + alive.stderr
    assert "ok, written" in alive.stdout

    job_id = Job.objects.enqueue_many("tests.sleep", [(JOB_SECONDS,)])[0].id
    connection.close()
    wait_started(events, job_id)
    signalled_at = time.monotonic()
    for signum in (recipe.stop_signal, *recipe.followed_by):
        os.kill(worker_pid, signal.Signals[signum])
    wait_for_state(health, "stopping", worker)
    # Through the grace period the probe keeps passing: no restart of a stopping worker.
    stopping = run(runnable_probe(recipe, health))
    assert stopping.returncode == 0, stopping.stdout + stopping.stderr
    assert "stopping, written" in stopping.stdout

    # wait() kills the worker and fails the test at the recipe's budget, as the manager would.
    assert worker.wait(recipe.stop_budget) == 0, worker.log
    took = time.monotonic() - signalled_at
    assert took < JOB_SECONDS + STOP_SLACK, f"{took:.1f}s to stop (budget {recipe.stop_budget:g}s)"
    assert Job.objects.get(id=job_id).status == JobStatus.SUCCEEDED
    assert record(health)["state"] == "stopped"
    stopped = run(runnable_probe(recipe, health))
    assert stopped.returncode == 1
    assert "stopped at" in stopped.stderr
    assert "(exit status 0)" in stopped.stderr


@functools.cache
def pid_namespaces_unavailable() -> str | None:
    """None if ``unshare`` can start a process as PID 1 of a new PID namespace, else why not."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return "unshare (util-linux) is not installed"
    result = subprocess.run(
        [*in_pid_namespace([sys.executable, "-c", "import os; print(os.getpid())"])],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if result.stdout.strip() != "1":
        return f"cannot start a process in a new PID namespace: {result.stderr.strip()}"
    return None


def require_pid_namespaces() -> None:
    reason = pid_namespaces_unavailable()
    if reason is not None:
        if IN_CI:
            pytest.fail(f"{reason}: CI must run the container recipes as PID 1")
        pytest.skip(reason)


def in_pid_namespace(command: list[str]) -> list[str]:
    """``command`` as PID 1 of a PID namespace of its own, as a container runtime starts
    a container's command; ``--kill-child`` takes it down with the test's handle on it."""
    return ["unshare", "--pid", "--fork", "--kill-child", *command]


def namespace_init(worker: WorkerProcess) -> int:
    """The host pid of the namespace's PID 1: the only child of ``unshare``."""
    children = Path(f"/proc/{worker.proc.pid}/task/{worker.proc.pid}/children")
    found: list[int] = []

    def forked() -> bool:
        found[:] = [int(pid) for pid in children.read_text().split()]
        return bool(found)

    wait_until(forked, timeout=10, what="unshare to start its child")
    assert len(found) == 1, found
    return found[0]


@pytest.mark.only_on(
    "sqlite", reason="shows how a container's PID 1 gets signals; the database does not matter"
)
@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_the_shell_form_the_guide_warns_against_never_passes_sigterm_on(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    """The control for the container runs above: were the Dockerfile's CMD in shell form,
    ``/bin/sh -c`` would be PID 1, ignore the runtime's SIGTERM, and the worker would
    run on until SIGKILL, as the guide says."""
    require_pid_namespaces()
    health = tmp_path / "health.json"
    shell_form = ["/bin/sh", "-c", shlex.join(runnable_worker(RECIPES["docker"](), health))]
    worker = start_worker(command=in_pid_namespace(shell_form))
    wait_for_state(health, "ok", worker)
    signalled = time.time()
    os.kill(namespace_init(worker), signal.SIGTERM)

    def still_running_after_the_signal() -> bool:
        # A worker that got SIGTERM says "stopping" at once; this one's loop goes on.
        data = record(health)
        assert data["state"] == "ok", f"the worker got SIGTERM after all: {data['state']}"
        return bool(data["written_at"] > signalled + SHELL_FORM_WATCH_SECONDS)

    wait_until(still_running_after_the_signal, timeout=15, what="the loop to write again")
    assert worker.alive()


def systemd_health_script(health_file: Path, max_age: str | None = None) -> list[str]:
    """The health service's whole ``sh -c`` command, with this interpreter and tmp path."""
    shell, dash_c, script = exec_argv(unit("arcature-health@.service"), "1")
    assert (shell, dash_c) == ("/bin/sh", "-c")
    recipe = RECIPES["systemd"]()
    assert health_script_probe(script) == recipe.probe
    replaced = shlex.join(runnable_probe(recipe, health_file, max_age))
    fallback = script.partition("||")[2]
    return ["/bin/sh", "-c", f"{replaced} ||{fallback}"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_killed_recipe_workers_fail_their_probes_once_max_age_has_passed(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    # A systemctl that records what the health service asks of it (there is no systemd here).
    stub = tmp_path / "bin"
    stub.mkdir()
    calls = tmp_path / "systemctl-calls.txt"
    (stub / "systemctl").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    (stub / "systemctl").chmod(0o755)
    path_env = f"{stub}:{os.environ.get('PATH', '/usr/bin:/bin')}"

    started: dict[str, tuple[Recipe, Path, WorkerProcess]] = {}
    for name, build in RECIPES.items():
        recipe = build()
        health = tmp_path / f"{name}.json"
        started[name] = (recipe, health, start_worker(command=runnable_worker(recipe, health)))
    for _, health, worker in started.values():
        wait_for_state(health, "ok", worker)
    systemd_health = started["systemd"][1]
    healthy = run(systemd_health_script(systemd_health), PATH=path_env)
    assert healthy.returncode == 0, healthy.stderr
    assert not calls.exists(), "the health service restarted a healthy worker"

    for _, _, worker in started.values():
        worker.signal(signal.SIGKILL)
        assert worker.wait(10) == -signal.SIGKILL
    for recipe, health, _ in started.values():
        assert record(health)["state"] == "ok"  # no chance to say goodbye
        # The guide's own --max-age 60 has not passed yet: still called alive.
        assert run(runnable_probe(recipe, health)).returncode == 0
    for recipe, health, _ in started.values():
        command = runnable_probe(recipe, health, max_age=SHORT_MAX_AGE)
        wait_until(
            lambda command=command: run(command).returncode == 1,  # type: ignore[misc]
            timeout=10,
            what=f"the {recipe.name} probe to notice the dead worker",
        )
        dead = run(command)
        assert "main loop is stuck or the process is gone" in dead.stderr
        assert time.time() - record(health)["written_at"] >= float(SHORT_MAX_AGE)
    restarted = run(systemd_health_script(systemd_health, SHORT_MAX_AGE), PATH=path_env)
    assert restarted.returncode == 0, restarted.stderr
    assert calls.read_text().splitlines() == ["try-restart arcature-worker@1.service"]


# --- the rules the guide states, on the recipes themselves ------------------------------


@READS_THE_GUIDE
def test_dockerfile_runs_the_worker_in_exec_form_and_stops_it_with_sigterm() -> None:
    cmd = dockerfile_value("CMD")
    assert exec_form(cmd) is not None, f"CMD {cmd} is the shell form: SIGTERM would not arrive"
    assert exec_form("python manage.py arcature_worker") is None  # the parser tells them apart
    assert dockerfile_value("STOPSIGNAL") == "SIGTERM"
    assert dockerfile_value("USER") not in {"root", "0"}


@READS_THE_GUIDE
@pytest.mark.parametrize("name", list(RECIPES))
def test_stop_budget_exceeds_the_shutdown_timeout(name: str) -> None:
    recipe = RECIPES[name]()
    assert recipe.stop_signal == "SIGTERM"
    shutdown = effective_shutdown_timeout(recipe)
    assert recipe.stop_budget > shutdown, (
        f"{name}: the manager kills after {recipe.stop_budget:g}s, "
        f"the worker may take {shutdown:g}s to hand its jobs back"
    )
    if name == "docker":
        assert compose_grace_seconds() > shutdown


def worker_commands_in_the_guide() -> list[list[str]]:
    """Every ``manage.py arcature_worker`` command line of the page: the recipes' and
    the console examples' (whose ``$ `` prompt and trailing ``&`` are not the command's)."""
    commands = [build().worker for build in RECIPES.values()]
    for fence in fences():
        if fence.language != "console":
            continue
        for line in fence.text.splitlines():
            if line.startswith("$ ") and "manage.py arcature_worker" in line:
                commands.append(shlex.split(line[2:].removesuffix("&")))
    return commands


@READS_THE_GUIDE
def test_every_worker_flag_in_the_guide_is_accepted_by_the_command() -> None:
    commands = worker_commands_in_the_guide()
    assert len(commands) >= 4  # three recipes and the liveness section's example
    parser = WorkerCommand().create_parser("manage.py", "arcature_worker")
    for words in commands:
        assert words[0] in PYTHONS, words
        assert words[1:3] == ["manage.py", "arcature_worker"], words
        # Raises CommandError on an unknown flag or a value its type refuses.
        options = parser.parse_args(words[3:])
        assert options.health_file == words[words.index("--health-file") + 1]
        if "--concurrency" in words:
            assert options.concurrency == int(words[words.index("--concurrency") + 1])


@READS_THE_GUIDE
def test_every_probe_in_the_guide_is_accepted_by_the_probe_parsers() -> None:
    module_parser = argparse.ArgumentParser(prog=PROBE_MODULE)
    add_probe_arguments(module_parser, positional=True)
    command_parser = HealthCommand().create_parser("manage.py", "arcature_health")
    probes = [build().probe for build in RECIPES.values()]
    for fence in fences():
        for line in fence.text.splitlines():
            if fence.language != "console" or not line.startswith("$ "):
                continue
            if "arcature_health" in line or PROBE_MODULE in line:
                probes.append(shlex.split(line[2:].split(";")[-1]))
    seen = {"module": 0, "command": 0}
    for words in probes:
        if words[1:3] == ["-m", PROBE_MODULE]:
            args = module_parser.parse_args(words[3:])  # exits 2 on a bad flag
            seen["module"] += 1
        else:
            assert words[1:3] == ["manage.py", "arcature_health"], words
            args = command_parser.parse_args(words[3:])
            seen["command"] += 1
        assert args.file.endswith(".json")
    assert seen["module"] >= 4  # the recipes' and the liveness section's
    assert seen["command"] >= 2


@READS_THE_GUIDE
def test_deployment_is_a_valid_apps_v1_deployment() -> None:
    deployment = yaml_document("Deployment")
    assert deployment["apiVersion"] == "apps/v1"
    name = deployment["metadata"]["name"]
    spec = deployment["spec"]
    assert isinstance(spec["replicas"], int)
    template = spec["template"]
    labels = template["metadata"]["labels"]
    selector = spec["selector"]["matchLabels"]
    assert selector, "an apps/v1 Deployment needs a selector"
    assert selector.items() <= labels.items(), "the selector does not match the pod labels"
    pod = template["spec"]
    assert isinstance(pod["terminationGracePeriodSeconds"], int)
    container = worker_container(deployment)
    assert container["name"]
    assert container["image"]
    assert all(isinstance(word, str) for word in container["command"])
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    assert set(mounts.values()) <= set(volumes), "a volumeMount names no volume of the pod"
    # The health file lives in a mounted, writable volume that the probe reads too.
    recipe = RECIPES["kubernetes"]()
    health_file = recipe.flag("--health-file")
    assert health_file is not None
    assert str(Path(health_file).parent) in mounts
    assert recipe.probe[3] == health_file
    probe = container["livenessProbe"]
    for field in ("initialDelaySeconds", "periodSeconds", "timeoutSeconds", "failureThreshold"):
        assert isinstance(probe[field], int), field
        assert probe[field] > 0, field
    # The autoscaling example scales this Deployment, by its name.
    scaled = yaml_document("ScaledObject")
    assert scaled["spec"]["scaleTargetRef"]["name"] == name


@READS_THE_GUIDE
def test_liveness_probe_fits_its_timeout_and_does_not_load_django(tmp_path: Path) -> None:
    deployment = yaml_document("Deployment")
    timeout = worker_container(deployment)["livenessProbe"]["timeoutSeconds"]
    health = tmp_path / "health.json"
    HealthFile(health, "host:1:abc", refresh_within=1.0).beat("ok", database_failures=0)
    command = runnable_probe(RECIPES["kubernetes"](), health)
    began = time.monotonic()
    result = run(command)
    took = time.monotonic() - began
    assert result.returncode == 0, result.stderr
    assert took < timeout, f"the probe took {took:.2f}s, its timeout is {timeout}s"
    # -X importtime lists every module the probe imported.
    traced = run([command[0], "-X", "importtime", *command[1:]])
    assert traced.returncode == 0, traced.stderr
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in traced.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    # The probe module itself runs as __main__; its parent packages are imported by name.
    assert "django_arcature.worker" in imported
    assert not {m for m in imported if m == "django" or m.startswith("django.")}


@READS_THE_GUIDE
def test_systemd_units_agree_with_each_other() -> None:
    worker = unit("arcature-worker@.service")
    recipe = RECIPES["systemd"]()
    health_file = recipe.flag("--health-file")
    assert health_file is not None
    # The health file's folder is the one systemd creates for the worker's user.
    runtime = unit_value(worker, "Service", "RuntimeDirectory").replace("%i", "1")
    assert str(Path(health_file).parent) == f"/run/{runtime}"
    assert recipe.probe[3] == health_file  # the health service reads what the worker writes
    assert unit_value(worker, "Service", "Restart") == "always"
    # Ordering after network-online.target does not start it: it must be wanted too.
    after = unit_value(worker, "Unit", "After").split()
    wants = " ".join(worker["Unit"].get("Wants", [])).split()
    if "network-online.target" in after:
        assert "network-online.target" in wants
    # The timer starts the health service of the same instance (a timer's default Unit=).
    assert "Unit" not in unit("arcature-health@.timer")["Timer"]


def write_units(folder: Path, python: str | None) -> None:
    for name in UNITS:
        text = unit_text(name)
        if python is not None:
            text = text.replace("/srv/mysite/.venv/bin/python", python)
        (folder / name).write_text(text)


def verify(folder: Path) -> tuple[int, list[str]]:
    """``systemd-analyze verify`` on instance 1 of the units in ``folder``: its exit
    status and the lines of its output that are about our units."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        if IN_CI:
            pytest.fail("systemd-analyze is missing: CI must verify the unit files")
        pytest.skip("systemd-analyze is not installed")
    instances = [str(folder / name.replace("@.", "@1.")) for name in UNITS]
    result = subprocess.run(
        [analyze, "verify", "--man=no", "--recursive-errors=no", *instances],
        capture_output=True,
        text=True,
        timeout=60,
    )
    ours = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if str(folder) in line or "arcature-" in line
    ]
    return result.returncode, ours


@READS_THE_GUIDE
def test_systemd_analyze_verify_accepts_the_units(tmp_path: Path) -> None:
    # The control: as written, the venv's python does not exist here, and verify says so,
    # which shows it really loads and checks these files without systemd as PID 1.
    as_written = tmp_path / "as-written"
    as_written.mkdir()
    write_units(as_written, python=None)
    status, lines = verify(as_written)
    assert status != 0
    assert any(
        "arcature-worker@1.service" in line and "/srv/mysite/.venv/bin/python" in line
        for line in lines
    ), lines

    runnable = tmp_path / "runnable"
    runnable.mkdir()
    write_units(runnable, python=sys.executable)
    status, lines = verify(runnable)
    assert lines == []
    assert status == 0
