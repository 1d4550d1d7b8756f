"""The install instructions that scripts/check-install-docs.py runs (in make release-check).

Why a quick test beside the slow run: the slow run only happens in the release check,
so this one fails the normal suite as soon as the README or the tutorial loses its
marked block, names a wheel of another version than the package's, or brings back a
placeholder or a tool it never says to install.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

import django_arcature

ROOT = Path(__file__).resolve().parents[2]


def load() -> ModuleType:
    path = ROOT / "scripts" / "check-install-docs.py"
    spec = importlib.util.spec_from_file_location("check_install_docs", path)
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


check = load()


def blocks(document: str) -> list[str]:
    text = (ROOT / document).read_text(encoding="utf-8")
    return [block.commands for block in check.install_blocks(document, text)]


@pytest.mark.parametrize("document", check.DOCUMENTS)
def test_each_document_has_one_install_block_that_makes_a_virtualenv(document: str) -> None:
    (commands,) = blocks(document)
    assert "scripts/find-python.sh" in commands  # a Python >= 3.12 even where python3 is older
    assert "-m venv .venv" in commands
    assert "pip install" in commands
    assert "<" not in commands  # no <version>-style placeholder to fill in by hand
    assert "python -m build" not in commands  # needs `pip install build` first


def test_the_readme_installs_the_wheel_of_this_version() -> None:
    (commands,) = blocks("README.md")
    assert f"django_arcature-{django_arcature.__version__}-py3-none-any.whl" in commands


def test_a_console_block_runs_its_prompt_lines_only() -> None:
    text = (
        "Intro\n<!-- install-check -->\n```console\n$ mkdir x && cd x\noutput line\n"
        "$ pip install django\n```\n"
    )
    (block,) = check.install_blocks("doc.md", text)
    assert block.commands == "mkdir x && cd x\npip install django\n"
    assert block.line == 3


def test_a_marker_without_a_block_is_an_error() -> None:
    with pytest.raises(ValueError, match="not followed by a fenced block"):
        check.install_blocks("doc.md", "<!-- install-check -->\ntext\n")


def test_pyenv_is_taken_off_path() -> None:
    path = "/root/.pyenv/shims:/root/.pyenv/bin:/usr/local/bin:/usr/bin"
    assert check.without_pyenv(path) == "/usr/local/bin:/usr/bin"
