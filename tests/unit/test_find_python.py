"""scripts/find-python.sh, which `make demo` uses to pick the Python for its virtualenv.

README promises that `make demo` finds a pyenv version. A shell where pyenv is installed
but not initialised (no shims on PATH: cron, an IDE, a login shell without `pyenv init`)
must still find it, and when nothing fits the error must say what it saw and how to name
a Python by hand. Each case runs the real script under bash with a PATH holding only the
tools it needs, so the machine's own Pythons cannot leak in.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "find-python.sh"


@pytest.fixture
def bare_path(tmp_path: Path) -> Path:
    """A directory with just the commands the script calls (ls, sort), and no Python."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ls", "sort"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    return bin_dir


def _fake_python(path: Path, version: str, *, new_enough: bool) -> Path:
    """A stand-in interpreter: answers the version check, and prints its version."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "#!/bin/sh\n"
        f'case "$2" in *version_info*) exit {0 if new_enough else 1};; esac\n'
        f"echo {version}\n"
    )
    path.chmod(0o755)
    return path


def _run(bin_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    bash = shutil.which("bash")
    assert bash
    return subprocess.run(
        [bash, str(SCRIPT)],
        env={"PATH": str(bin_dir), **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_pyenv_version_is_found_without_pyenv_on_path(bare_path: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    older = _fake_python(home / ".pyenv/versions/3.12.1/bin/python", "3.12.1", new_enough=True)
    newer = _fake_python(home / ".pyenv/versions/3.13.0/bin/python", "3.13.0", new_enough=True)
    result = _run(bare_path, HOME=str(home))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(newer)
    assert older != newer


def test_pyenv_root_wins_over_home(bare_path: Path, tmp_path: Path) -> None:
    _fake_python(tmp_path / "home/.pyenv/versions/3.12.1/bin/python", "3.12.1", new_enough=True)
    chosen = _fake_python(
        tmp_path / "elsewhere/versions/3.12.9/bin/python", "3.12.9", new_enough=True
    )
    result = _run(bare_path, HOME=str(tmp_path / "home"), PYENV_ROOT=str(tmp_path / "elsewhere"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(chosen)


def test_a_real_python_on_path_is_used(bare_path: Path, tmp_path: Path) -> None:
    (bare_path / "python3.13").symlink_to(sys.executable)
    result = _run(bare_path, HOME=str(tmp_path / "nowhere"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(bare_path / "python3.13")


def test_nothing_new_enough_says_what_it_saw_and_how_to_choose(
    bare_path: Path, tmp_path: Path
) -> None:
    _fake_python(bare_path / "python3", "3.11.2", new_enough=False)
    _fake_python(tmp_path / "home/.pyenv/versions/3.11.7/bin/python", "3.11.7", new_enough=False)
    result = _run(bare_path, HOME=str(tmp_path / "home"))
    assert result.returncode == 1
    assert result.stdout == ""
    assert "no Python 3.12 or newer found" in result.stderr
    assert f"{tmp_path / 'home/.pyenv'}/versions" in result.stderr
    assert f"{bare_path / 'python3'} is 3.11.2" in result.stderr
    assert "make demo PYTHON_FOR_VENV=/path/to/python3.12" in result.stderr


def test_the_makefile_uses_the_script_and_lets_the_user_override_it() -> None:
    makefile = (SCRIPT.parents[1] / "Makefile").read_text()
    assert "PYTHON_FOR_VENV = $(shell scripts/find-python.sh)" in makefile


PYTHON_PATH = SCRIPT.with_name("python-path.sh")


def _fake_exact_python(path: Path, minor: int) -> Path:
    """A stand-in for Python 3.<minor>: passes python-path.sh's exact-version check
    for its own minor only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\ncase "$2" in *"(3, {minor})"*) exit 0;; esac\nexit 1\n')
    path.chmod(0o755)
    return path


@pytest.fixture
def tool_path(bare_path: Path) -> Path:
    """bare_path plus what python-path.sh calls to place its links."""
    for tool in ("mkdir", "ln", "readlink"):
        found = shutil.which(tool)
        assert found, tool
        (bare_path / tool).symlink_to(found)
    return bare_path


def _run_python_path(bin_dir: Path, links: Path, **env: str) -> subprocess.CompletedProcess[str]:
    bash = shutil.which("bash")
    assert bash
    return subprocess.run(
        [bash, str(PYTHON_PATH)],
        env={"PATH": str(bin_dir), "ARCATURE_PYTHONS_DIR": str(links), **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_make_test_finds_both_pythons_in_pyenv_without_pyenv_on_path(
    tool_path: Path, tmp_path: Path
) -> None:
    """`make test` (tox's base_python) has the same promise as `make demo`: pyenv's
    versions are found when pyenv itself is not on PATH."""
    home = tmp_path / "home"
    py312 = _fake_exact_python(home / ".pyenv/versions/3.12.1/bin/python", 12)
    py313 = _fake_exact_python(home / ".pyenv/versions/3.13.0/bin/python", 13)
    links = tmp_path / "pythons"
    result = _run_python_path(tool_path, links, HOME=str(home))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert Path(result.stdout.strip()) == links.resolve()
    assert (links / "python3.12").resolve() == py312.resolve()
    assert (links / "python3.13").resolve() == py313.resolve()


def test_make_test_says_which_python_is_missing(tool_path: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    _fake_exact_python(home / ".pyenv/versions/3.13.0/bin/python", 13)
    result = _run_python_path(tool_path, tmp_path / "pythons", HOME=str(home))
    assert "python3.12 not found; its tox environments will fail" in result.stderr
    assert (tmp_path / "pythons" / "python3.13").exists()
    assert not (tmp_path / "pythons" / "python3.12").exists()


def test_a_second_run_with_its_own_links_on_path_keeps_them_working(
    tool_path: Path, tmp_path: Path
) -> None:
    """`make test` puts the links on PATH, then release-check asks again: the link
    found on PATH must not be linked to itself (a loop that no longer runs)."""
    home = tmp_path / "home"
    py312 = _fake_exact_python(home / ".pyenv/versions/3.12.1/bin/python", 12)
    py313 = _fake_exact_python(home / ".pyenv/versions/3.13.0/bin/python", 13)
    links = tmp_path / "pythons"
    assert _run_python_path(tool_path, links, HOME=str(home)).returncode == 0
    again = _run_python_path(Path(f"{links}:{tool_path}"), links, HOME=str(home))
    assert again.returncode == 0, again.stderr
    assert again.stderr == ""
    assert (links / "python3.12").resolve() == py312.resolve()
    assert (links / "python3.13").resolve() == py313.resolve()
