"""Second Unix users for the hostile-environment suite, and processes run as them.

``arcature-hostile`` plays another local user who plants files where we will look;
``arcature-owner`` plays a worker that does not run as root (root bypasses every
permission check, so ownership must be judged by uid, and that needs a real
unprivileged process to show). Both are system users without a home, created
once (``useradd`` is idempotent here: an existing user is reused).

A process "as" a user is this same interpreter, started as root, that imports
what it needs and then drops to that user's uid and gid for good: the virtual
environment's interpreter may live where an unprivileged user cannot read (as
``/root/.pyenv`` does in CI), so the code after the drop must not import anything
new from there.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.dburl import database_url

REPO = Path(__file__).resolve().parents[2]

HOSTILE = "arcature-hostile"
OWNER = "arcature-owner"

_PRELUDE = """\
import errno, json, os, socket, stat, sys, threading, time
{imports}
os.setgroups([])
os.setgid({gid})
os.setuid({uid})
assert os.getuid() == os.geteuid() == {uid} and os.getgid() == {gid}
"""

#: What a process playing one of our own processes imports before it drops root.
DJANGO_IMPORTS = """\
import logging
import django
django.setup()
from django.db import connections
from django_arcature import hints
from django_arcature.conf import get_settings
from django_arcature.worker import health
get_settings()
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
"""


def require_root() -> None:
    """Skip, loudly, when not root (locally); in CI (root) this never skips.

    A skip fails a CI run (tests/conftest.py), so a CI machine that is not root
    fails these tests instead of passing them unseen.
    """
    if os.geteuid() != 0:
        pytest.skip(
            "NOT RUN: the hostile local environment suite needs root (it creates the Unix "
            f"users {HOSTILE} and {OWNER}); CI runs it as root. Run it with sudo to see it."
        )


def ensure_user(name: str) -> pwd.struct_passwd:
    """The system user ``name``, created without a home or a login shell if missing."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    done = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        text=True,
        check=False,
    )
    # 9: the user exists (made meanwhile by a parallel run): fine.
    if done.returncode not in (0, 9):
        pytest.fail(f"useradd {name} failed ({done.returncode}): {done.stderr}")
    return pwd.getpwnam(name)


def _command(user: pwd.struct_passwd, code: str, imports: str) -> list[str]:
    prelude = _PRELUDE.format(imports=imports, uid=user.pw_uid, gid=user.pw_gid)
    return [sys.executable, "-c", prelude + textwrap.dedent(code)]


def _env(extra: dict[str, str] | None) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "ARCATURE_USE_TEST_DATABASE": "1",
        "DATABASE_URL": database_url(),
        "PYTHONPATH": str(REPO),
    }
    env.pop("XDG_RUNTIME_DIR", None)
    return {**env, **(extra or {})}


def run_as(
    user: pwd.struct_passwd,
    code: str,
    *,
    django: bool = False,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    imports: str = "",
) -> Any:
    """Run ``code`` as ``user``; return what it printed last as JSON (it must print one).

    ``django`` sets Django up (and ``imports`` runs) before root is dropped.
    """
    done = subprocess.run(
        _command(user, code, (DJANGO_IMPORTS if django else "") + textwrap.dedent(imports)),
        cwd=REPO,
        env=_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"process as {user.pw_name} failed:\n{done.stdout}\n{done.stderr}")
    lines = done.stdout.strip().splitlines()
    assert lines, f"process as {user.pw_name} printed nothing; stderr:\n{done.stderr}"
    result = json.loads(lines[-1])
    if isinstance(result, dict):
        result["stderr"] = done.stderr
    return result


def spawn_as(
    user: pwd.struct_passwd, code: str, *, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """Start ``code`` as ``user`` in the background (stdout piped, line by line)."""
    return subprocess.Popen(
        _command(user, code, ""),
        cwd=REPO,
        env=_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
