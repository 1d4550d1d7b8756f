"""Run every runnable Python sample of the documentation (see ``samples.py`` for the marks).

Run by tox's ``docs`` environment against the example project's settings and a
SQLite test database:
``PYTHONPATH=example_project pytest docs --ds=demo_site.settings``.
One test per page, so the samples of a page can build on each other.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from docs import samples

PAGES = samples.pages()


def test_every_python_sample_is_marked() -> None:
    """An unmarked fence would be neither run nor explained: refuse it."""
    problems = [
        f"{s.path.relative_to(samples.DOCS.parent)}:{s.line}: {s.reason}"
        for page in PAGES
        for s in page.errors
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "page",
    [page for page in PAGES if page.runnable],
    ids=lambda page: str(page.path.relative_to(samples.DOCS)),
)
def test_page_samples_run(page: samples.Page) -> None:
    ran = list(samples.run(page))
    samples.executed.extend(ran)
    assert len(ran) == len(page.runnable)


# --- the runner itself ------------------------------------------------------------

PAGE = """\
# A page

<!-- sample: setup
hidden = 40
-->

<!-- sample: run module=docs_runner_check.jobs -->
```python
def answer() -> int:
    return 42
```

Some prose.

<!-- sample: run -->
```python
from docs_runner_check.jobs import answer
assert answer() == hidden + 2
```

<!-- sample: run -->
```python
>>> answer() + 1
43
```

<!-- sample: not-run: needs a model of your own -->
```python
Order.objects.create()
```

```python
unmarked()
```

<!-- sample: not-run -->
```python
no_reason()
```

<!-- sample: run -->

A paragraph between a mark and its fence ends the mark.

```python
also_unmarked()
```
"""


def test_the_runner_reads_the_marks(tmp_path: Path) -> None:
    path = tmp_path / "page.md"
    path.write_text(PAGE)
    page = samples.parse(path)
    assert [s.action for s in page.samples] == [
        "setup", "run", "run", "run", "not-run", "error", "error", "error",
    ]  # fmt: skip
    assert page.samples[1].module == "docs_runner_check.jobs"
    assert page.samples[4].reason == "needs a model of your own"
    assert [s.reason for s in page.errors] == [
        "no <!-- sample: run / not-run: why --> mark",
        "not-run needs a reason",
        "no <!-- sample: run / not-run: why --> mark",
    ]
    assert [s.line for s in page.errors] == [33, 38, 46]  # the first line of code


def test_the_runner_runs_a_page_in_order_and_checks_sessions(tmp_path: Path) -> None:
    path = tmp_path / "page.md"
    path.write_text(PAGE)
    ran = list(samples.run(samples.parse(path)))
    assert len(ran) == 4
    assert "docs_runner_check.jobs" not in sys.modules  # the page's modules are removed


def test_a_session_whose_output_differs_fails_with_the_line(tmp_path: Path) -> None:
    path = tmp_path / "page.md"
    path.write_text("<!-- sample: run -->\n```python\n>>> 1 + 1\n3\n```\n")
    with pytest.raises(AssertionError, match=r"line 3[\s\S]*Expected:\s+3\s+Got:\s+2"):
        list(samples.run(samples.parse(path)))


def test_a_failing_sample_names_its_line_in_the_page(tmp_path: Path) -> None:
    path = tmp_path / "page.md"
    path.write_text("text\n\n<!-- sample: run -->\n```python\nx = 1\nassert x == 2\n```\n")
    with pytest.raises(AssertionError) as failure:
        list(samples.run(samples.parse(path)))
    frame = failure.traceback[-1]
    assert (Path(frame.path), frame.lineno + 1) == (path, 6)
