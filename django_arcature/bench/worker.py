"""``python -m django_arcature.bench.worker [arcature_worker options]``.

An ordinary ``arcature_worker`` that also knows the benchmark's no-op job; the
settings come from ``DJANGO_SETTINGS_MODULE`` as for ``manage.py``.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    import django

    django.setup()
    from django.core.management import call_command

    from . import jobs  # noqa: F401  (registers the no-op job)

    call_command("arcature_worker", *argv)


if __name__ == "__main__":
    main(sys.argv[1:])
