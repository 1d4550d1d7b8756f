"""Sphinx configuration for django-arcature's documentation site.

Built by tox's ``docs`` environment (``make docs``) with warnings as errors:
``sphinx-build -W --keep-going -b html docs var/docs-html``. Pages are MyST
Markdown; the API reference is generated from the docstrings with autodoc, which
imports the package, so Django is configured first with the test settings (a
SQLite database that is never opened during the build).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
os.environ.setdefault("ARCATURE_TEST_DB", "sqlite")

import django  # noqa: E402

django.setup()

import django_arcature  # noqa: E402

project = "django-arcature"
author = "django-arcature developers"
copyright = "django-arcature developers"
release = django_arcature.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**/__pycache__"]

# MyST: ::: fences for directives, {term}`…` definitions, heading anchors for
# cross-page links such as [settings](reference/settings.md#lease_seconds).
myst_enable_extensions = ["colon_fence", "deflist", "fieldlist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"show-inheritance": False}
# Annotations refer to names that only exist for type checkers (TYPE_CHECKING
# imports, ParamSpec variables) or to Django internals without an inventory
# entry. They are shown as written; an unresolved one is not a documentation
# error in our own text.
nitpicky = False
# No intersphinx: the build must work offline (CI has no network), and a failed
# inventory download would be a warning, hence an error under -W.

html_theme = "furo"
html_title = f"django-arcature {release}"
html_static_path: list[str] = []
