"""Run every runnable Python sample of the documentation (see ``samples.py`` for the marks).

Run by tox's ``docs`` environment against the example project's settings and a
SQLite test database:
``PYTHONPATH=example_project pytest docs --ds=demo_site.settings``.
One test per page, so the samples of a page can build on each other.
"""

from __future__ import annotations

import ast
import builtins
import re
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


# --- excerpts of the example project ---------------------------------------------------

_EXCERPT = re.compile(r"^an excerpt of (?P<path>\S+\.py)")


def _without_docstrings(node: ast.AST) -> ast.AST:
    """An excerpt may leave out docstrings; everything else must be the file's."""
    for child in ast.walk(node):
        body = getattr(child, "body", None)
        if (
            isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and isinstance(body, list)
            and len(body) > 1
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            del body[0]
    return node


def _definitions(tree: ast.Module) -> dict[str, str]:
    """Top-level functions and classes by name, as AST dumps (layout, comments and
    docstrings aside)."""
    return {
        node.name: ast.dump(_without_docstrings(node))
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }


def _imports(tree: ast.Module) -> set[str]:
    return {ast.dump(node) for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)}


#: Pages whose excerpts are checked. Others may quote freely for now (django-tasks.md's
#: ``greet`` leaves out ``queue_name="default"``); add a page once its excerpts match.
CHECKED_EXCERPT_PAGES = {"howto/define-jobs.md"}

EXCERPTS = [
    sample
    for page in PAGES
    if str(page.path.relative_to(samples.DOCS)) in CHECKED_EXCERPT_PAGES
    for sample in page.samples
    if sample.action == "not-run" and _EXCERPT.match(sample.reason)
]


@pytest.mark.parametrize(
    "sample", EXCERPTS, ids=lambda s: f"{s.path.relative_to(samples.DOCS)}:{s.line}"
)
def test_an_excerpt_is_the_files_code(sample: samples.Sample) -> None:
    """A sample shown as "an excerpt of FILE" is that file's code, so a reader can paste it.

    Each function and class it shows is the file's (compared as syntax trees, so
    comments and line breaks may differ), and each import it shows is one the file
    makes: an excerpt that drifted from the file it quotes fails here.
    """
    match = _EXCERPT.match(sample.reason)
    assert match
    source = ast.parse((samples.DOCS.parent / match["path"]).read_text())
    shown = ast.parse(sample.code)
    defined = _definitions(source)
    for name, tree in _definitions(shown).items():
        assert name in defined, f"{name} is not in {match['path']}"
        assert tree == defined[name], f"{name} differs from {match['path']}"
    assert _imports(shown) <= _imports(source), f"an import not in {match['path']}"


def test_define_jobs_shows_every_job_of_the_example() -> None:
    """The define-jobs page says its excerpts of jobs.py, pasted in order, are the whole file."""
    path = "example_project/newsletter/jobs.py"
    page = samples.DOCS / "howto" / "define-jobs.md"
    shown = [s for s in EXCERPTS if s.path == page and s.reason.startswith(f"an excerpt of {path}")]
    module = ast.parse("\n".join(s.code for s in shown))
    source = ast.parse((samples.DOCS.parent / path).read_text())
    assert set(_definitions(module)) == set(_definitions(source))
    needed = {
        node.id
        for node in ast.walk(module)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    }
    bound = set(_definitions(module)) | {
        (alias.asname or alias.name).split(".")[0]
        for node in module.body
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    local = {
        node.id
        for node in ast.walk(module)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
    } | {node.arg for node in ast.walk(module) if isinstance(node, ast.arg)}
    missing = needed - bound - local - set(dir(builtins))
    assert not missing, f"used on the page but never imported or defined: {sorted(missing)}"


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


# --- async samples ---------------------------------------------------------------------

#: Synchronous calls that query the database: Django refuses them on an event loop.
_SYNC_ONLY = {"enqueue": "aenqueue", "enqueue_many": "aenqueue", "wait": "async_wait"}


def _sync_calls_on_the_event_loop(code: str) -> list[str]:
    """``.enqueue()`` / ``.wait()`` called inside an ``await`` or an ``async def``."""
    if code.lstrip().startswith(">>>"):  # a session: its input lines only
        code = "\n".join(
            line[4:] for line in code.splitlines() if line.startswith((">>> ", "... ", ">>>"))
        )
    try:
        tree = compile(code, "<sample>", "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError:  # a shown-only sketch (`{...}`): nothing to read
        return []
    found = []
    for scope in ast.walk(tree):
        if not isinstance(scope, ast.Await | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(scope):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _SYNC_ONLY
            ):
                found.append(
                    f"line {node.lineno}: .{node.func.attr}() (use {_SYNC_ONLY[node.func.attr]})"
                )
    return found


def test_no_sample_calls_a_sync_enqueue_or_wait_on_the_event_loop() -> None:
    """``await handle.enqueue(x).async_wait()`` raises SynchronousOnlyOperation in a view."""
    problems = [
        f"{sample.path.relative_to(samples.DOCS.parent)}:{sample.line}: {problem}"
        for page in PAGES
        for sample in page.samples
        for problem in _sync_calls_on_the_event_loop(sample.code)
    ]
    assert not problems, "\n".join(problems)


def test_the_async_check_finds_the_sync_enqueue_it_is_for() -> None:
    code = "job = await resize.enqueue(1).async_wait(timeout=30)\n"
    assert _sync_calls_on_the_event_loop(code) == ["line 1: .enqueue() (use aenqueue)"]
    fine = "async def view(request):\n    job = await resize.aenqueue(1)\n"
    assert _sync_calls_on_the_event_loop(fine) == []
