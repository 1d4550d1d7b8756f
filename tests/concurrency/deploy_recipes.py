"""The deployment recipes of docs/howto/deploy.md, read out of the page itself.

The tests in test_deploy_recipes.py run and check what this module finds in the
page, never a copy of it, so the guide and its tests cannot drift apart. A
fence is identified by its language and, for unit files, by the file-name
comment on its first line; YAML documents by their ``kind``. Each lookup
insists on exactly one match, so a recipe that is renamed, duplicated or
removed fails the tests loudly instead of leaving a recipe untested.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.concurrency.conftest import REPO

DEPLOY_MD = REPO / "docs" / "howto" / "deploy.md"

#: The interpreter spellings the recipes use; the tests run the current one instead.
PYTHONS = frozenset({"python", "/srv/mysite/.venv/bin/python"})
#: The module that probes without loading Django.
PROBE_MODULE = "django_arcature.worker.health"

_FENCE = re.compile(r"^```(?P<language>[\w-]*)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Fence:
    """One fenced block of the page: its language, text and first line number."""

    language: str
    text: str
    line: int

    @property
    def file_name(self) -> str | None:
        """The name in a first-line comment such as ``# /etc/systemd/system/x.service``."""
        first = self.text.split("\n", 1)[0]
        if not first.startswith("# /"):
            return None
        return first[2:].strip().rsplit("/", 1)[1]


def fences(path: Path = DEPLOY_MD) -> list[Fence]:
    text = path.read_text()
    return [
        Fence(m["language"], m["body"], text.count("\n", 0, m.start()) + 1)
        for m in _FENCE.finditer(text)
    ]


def page_text(path: Path = DEPLOY_MD) -> str:
    return path.read_text()


def _only(found: list[Fence], what: str) -> Fence:
    assert len(found) == 1, f"expected one {what} in {DEPLOY_MD.name}, found {len(found)}"
    return found[0]


# --- systemd ---------------------------------------------------------------------------

#: section → key → every value given (a key may repeat), in order.
Unit = dict[str, dict[str, list[str]]]


def parse_unit(text: str) -> Unit:
    """A unit file as systemd reads it: a trailing backslash joins the next line (the
    backslash becomes a space), ``#``/``;`` start comments, keys may repeat."""
    unit: Unit = {}
    section: dict[str, list[str]] | None = None
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        if pending:
            pending += " " + raw.strip()
        else:
            pending = raw.strip()
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        logical.append(pending)
        pending = ""
    for line in logical:
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = unit.setdefault(line[1:-1], {})
            continue
        assert section is not None, f"{line!r} comes before any [Section]"
        key, sep, value = line.partition("=")
        assert sep, f"not a key=value line: {line!r}"
        section.setdefault(key.strip(), []).append(value.strip())
    return unit


def unit_value(unit: Unit, section: str, key: str) -> str:
    values = unit[section][key]
    assert len(values) == 1, f"[{section}] {key}= is given {len(values)} times"
    return values[0]


def unit_fence(file_name: str) -> Fence:
    return _only(
        [f for f in fences() if f.language == "ini" and f.file_name == file_name], file_name
    )


def unit_text(file_name: str) -> str:
    """The unit file's text as written in the guide (its first-line comment included)."""
    return unit_fence(file_name).text


def unit(file_name: str) -> Unit:
    return parse_unit(unit_text(file_name))


def exec_argv(unit: Unit, instance: str) -> list[str]:
    """``ExecStart=`` of a template unit instantiated as ``instance``, split as systemd
    splits it (quotes group words; the recipes use no ``-``/``@``/``+`` prefixes)."""
    line = unit_value(unit, "Service", "ExecStart").replace("%i", instance)
    assert line[0] not in "-@+:!", f"ExecStart prefix not handled here: {line!r}"
    return shlex.split(line)


def health_script_probe(script: str) -> list[str]:
    """The probe in the health service's ``sh -c`` script: the part before ``||``."""
    probe, sep, fallback = script.partition("||")
    assert sep, script
    assert "systemctl try-restart" in fallback, script
    return shlex.split(probe)


def seconds(timespan: str) -> float:
    """A systemd time span of the forms the recipes may use: ``40``, ``40s``, ``2min``."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(s|sec|min|m)?", timespan.strip())
    assert match, f"time span not understood here: {timespan!r}"
    factor = 60 if match[2] in {"min", "m"} else 1
    return float(match[1]) * factor


# --- the Dockerfile --------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` pairs; a trailing backslash continues an instruction."""
    text = _only([f for f in fences() if f.language == "dockerfile"], "dockerfile fence").text
    joined = re.sub(r"\\\n", "", text)
    pairs = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, arguments = line.partition(" ")
        pairs.append((instruction.upper(), arguments.strip()))
    return pairs


def dockerfile_value(instruction: str) -> str:
    found = [args for name, args in dockerfile_instructions() if name == instruction]
    # Docker obeys the last CMD / STOPSIGNAL / USER; the recipe should give one only.
    assert len(found) == 1, f"the Dockerfile has {len(found)} {instruction} instructions"
    return found[0]


def exec_form(arguments: str) -> list[str] | None:
    """The JSON list of an exec-form ``CMD``, or None for the shell form."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return None
    if isinstance(value, list) and all(isinstance(word, str) for word in value):
        return value
    return None


# --- Kubernetes ------------------------------------------------------------------------


def yaml_documents() -> list[dict[str, Any]]:
    documents = []
    for fence in fences():
        if fence.language == "yaml":
            loaded = yaml.safe_load(fence.text)
            assert isinstance(loaded, dict), f"the yaml fence at line {fence.line} is not a map"
            documents.append(loaded)
    return documents


def yaml_document(kind: str) -> dict[str, Any]:
    found = [d for d in yaml_documents() if d.get("kind") == kind]
    assert len(found) == 1, f"expected one {kind} in {DEPLOY_MD.name}, found {len(found)}"
    return found[0]


def worker_container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, "the recipe runs one container per pod"
    container: dict[str, Any] = containers[0]
    return container


# --- one recipe, as the tests run it ---------------------------------------------------


@dataclass(frozen=True)
class Recipe:
    """What the tests need from one recipe, exactly as the guide gives it."""

    name: str
    worker: list[str]  # the worker's command line
    probe: list[str]  # the liveness probe's command line
    stop_signal: str
    stop_budget: float  # seconds the process manager waits before SIGKILL
    #: Signals the manager sends right after the stop signal: systemd always follows
    #: KillSignal= with SIGCONT, so that a suspended process can act on it (systemd.kill(5)).
    followed_by: tuple[str, ...] = ()
    #: The worker is its container's PID 1: it gets only the signals it has handlers for.
    pid1: bool = False

    def flag(self, name: str) -> str | None:
        """The value given to option ``name`` in the worker's command, or None."""
        return flag_value(self.worker, name)


def flag_value(words: list[str], name: str) -> str | None:
    """The word after ``name`` in a command line, or None when ``name`` is absent."""
    if name not in words:
        return None
    return words[words.index(name) + 1]


def systemd_recipe() -> Recipe:
    worker_unit = unit("arcature-worker@.service")
    script = exec_argv(unit("arcature-health@.service"), "1")
    assert script[:2] == ["/bin/sh", "-c"], script
    return Recipe(
        name="systemd",
        worker=exec_argv(worker_unit, "1"),
        probe=health_script_probe(script[2]),
        stop_signal=unit_value(worker_unit, "Service", "KillSignal"),
        stop_budget=seconds(unit_value(worker_unit, "Service", "TimeoutStopSec")),
        followed_by=("SIGCONT",),
    )


def docker_stop_seconds() -> float:
    """The ``docker stop -t N`` the guide's prose gives for the image."""
    match = _only_match(r"`docker stop -t (\d+)`")
    return float(match)


def compose_grace_seconds() -> float:
    return float(_only_match(r"`stop_grace_period: (\d+)s`"))


def _only_match(pattern: str) -> str:
    found = re.findall(pattern, page_text())
    assert len(found) == 1, f"expected {pattern!r} once in {DEPLOY_MD.name}, found {found}"
    return str(found[0])


def docker_recipe() -> Recipe:
    command = exec_form(dockerfile_value("CMD"))
    assert command is not None, "the Dockerfile's CMD is not in exec form"
    # The Dockerfile defines no probe; the image's health file is checked by the same
    # module command the Kubernetes recipe runs in that image, pointed at its path.
    probe = kubernetes_recipe().probe
    path = flag_value(command, "--health-file")
    assert path is not None, "the Dockerfile's worker writes no health file"
    return Recipe(
        name="docker",
        worker=command,
        probe=[*probe[:3], path, *probe[4:]],
        stop_signal=dockerfile_value("STOPSIGNAL"),
        stop_budget=docker_stop_seconds(),
        pid1=True,
    )


def kubernetes_recipe() -> Recipe:
    deployment = yaml_document("Deployment")
    container = worker_container(deployment)
    return Recipe(
        name="kubernetes",
        worker=list(container["command"]),
        probe=list(container["livenessProbe"]["exec"]["command"]),
        stop_signal="SIGTERM",  # what the kubelet sends a container's process
        stop_budget=float(deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]),
        pid1=True,
    )


RECIPES = {"systemd": systemd_recipe, "docker": docker_recipe, "kubernetes": kubernetes_recipe}
