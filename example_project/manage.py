#!/usr/bin/env python
"""The example project's manage.py: ``python example_project/manage.py <command>``."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main() -> None:
    # Runnable from anywhere: the project's own directory goes first on the path.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
