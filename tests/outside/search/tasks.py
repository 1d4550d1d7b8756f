"""The package's background work, declared with the framework's own ``@task``."""

from __future__ import annotations

from pathlib import Path

from django_arcature.tasks.compat import task


@task
def update_index(model: str, pks: list[int], index_file: str) -> int:
    """Appends one line per object to ``index_file`` (the effect a test can see)."""
    with Path(index_file).open("a") as out:
        for pk in pks:
            out.write(f"{model}:{pk}\n")
    return len(pks)
