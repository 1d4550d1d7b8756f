"""Find the Python samples in the documentation pages and run them.

Every ```` ```python ```` fence in ``docs/**/*.md`` must say, in an HTML comment on
the line(s) before it, what the build does with it, so that a sample can never
silently go stale:

``<!-- sample: run -->``
    Executed. The runnable samples of one page share one namespace, in page
    order, like a reader's shell session, inside one test-database transaction.
``<!-- sample: run module=greetings.jobs -->``
    Executed as the body of a module of that name, which later samples import
    (``from greetings.jobs import send_greeting``): the file a tutorial step
    asks the reader to write.
``<!-- sample: not-run: REASON -->``
    Shown only; the reason is required (it needs a worker process, a model of
    your own, a second database …).
``<!-- sample: setup`` … ``-->``
    Hidden code run before the next sample (stand-ins a reader would have,
    such as ``BASE_DIR`` for a settings fragment). Readers never see it.

An unmarked Python fence, a ``not-run`` without a reason or an unknown mark is
an error, reported with its line number.
"""

from __future__ import annotations

import doctest
import re
import sys
import textwrap
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

DOCS = Path(__file__).resolve().parent

#: Samples run in this process so far (the pytest summary counts them).
executed: list[Sample] = []

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_MARK = re.compile(r"^\s*<!--\s*sample:\s*(?P<body>.*?)\s*-->\s*$")
_SETUP_OPEN = re.compile(r"^\s*<!--\s*sample:\s*setup\s*$")


@dataclass
class Sample:
    """One fenced Python block (or hidden setup) and what to do with it."""

    path: Path
    line: int  # 1-based line of the first line of code
    code: str
    action: str  # "run", "setup", "not-run", or "error"
    module: str | None = None
    reason: str = ""


@dataclass
class Page:
    path: Path
    samples: list[Sample] = field(default_factory=list)

    @property
    def runnable(self) -> list[Sample]:
        return [s for s in self.samples if s.action in ("run", "setup")]

    @property
    def errors(self) -> list[Sample]:
        return [s for s in self.samples if s.action == "error"]


def pages() -> list[Page]:
    """Every documentation page with at least one Python sample, in path order."""
    found = []
    for path in sorted(DOCS.rglob("*.md")):
        if "_build" in path.parts:
            continue
        page = parse(path)
        if page.samples:
            found.append(page)
    return found


def parse(path: Path) -> Page:
    page = Page(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    pending: tuple[str, int] | None = None  # the last mark seen, with its line number
    index = 0
    while index < len(lines):
        line = lines[index]
        if _SETUP_OPEN.match(line):
            end = _closing_comment(lines, index + 1)
            code = "\n".join(lines[index + 1 : end])
            page.samples.append(Sample(path, index + 2, textwrap.dedent(code), "setup"))
            index = end + 1
            continue
        mark = _MARK.match(line)
        if mark:
            pending = (mark.group("body"), index + 1)
            index += 1
            continue
        fence = _FENCE.match(line)
        if fence and fence.group("info").strip():
            end = _closing_fence(lines, index + 1, fence.group("fence"))
            info = fence.group("info").strip().split()
            language = info[-1] if info[0].startswith("{") and len(info) > 1 else info[0]
            if language in ("python", "py", "python3"):
                body = "\n".join(
                    line.removeprefix(fence.group("indent")) for line in lines[index + 1 : end]
                )
                page.samples.append(_classify(path, index + 2, body, pending))
            pending = None
            index = end + 1
            continue
        if line.strip():
            pending = None  # a mark applies only to the fence right after it
        index += 1
    return page


def _classify(path: Path, line: int, code: str, mark: tuple[str, int] | None) -> Sample:
    if mark is None:
        return Sample(
            path, line, code, "error", reason="no <!-- sample: run / not-run: why --> mark"
        )
    body, _ = mark
    if body == "run" or body.startswith("run "):
        options = dict(part.split("=", 1) for part in body.split()[1:] if "=" in part)
        unknown = set(body.split()[1:]) - {f"{k}={v}" for k, v in options.items()}
        if unknown or set(options) - {"module"}:
            return Sample(path, line, code, "error", reason=f"unknown option in {body!r}")
        return Sample(path, line, code, "run", module=options.get("module"))
    if body.startswith("not-run"):
        reason = body.removeprefix("not-run").lstrip(":").strip()
        if not reason:
            return Sample(path, line, code, "error", reason="not-run needs a reason")
        return Sample(path, line, code, "not-run", reason=reason)
    return Sample(path, line, code, "error", reason=f"unknown sample mark {body!r}")


def _closing_fence(lines: list[str], start: int, fence: str) -> int:
    for index in range(start, len(lines)):
        if lines[index].strip().startswith(fence) and not lines[index].strip().strip(fence[0]):
            return index
    return len(lines)


def _closing_comment(lines: list[str], start: int) -> int:
    for index in range(start, len(lines)):
        if lines[index].strip() == "-->":
            return index
    return len(lines)


def run(page: Page) -> Iterator[Sample]:
    """Execute the page's runnable samples in order; yield each after it ran."""
    namespace: dict[str, object] = {
        "__name__": f"docs_{page.path.stem.replace('-', '_')}",
        "__file__": str(page.path),  # lets a hidden check read the page it is on
    }
    added_modules: list[str] = []
    try:
        for sample in page.runnable:
            if sample.code.lstrip().startswith(">>>"):
                _run_session(sample, namespace)
                yield sample
                continue
            # Pad with newlines so a traceback names the line in the .md file.
            source = "\n" * (sample.line - 1) + sample.code
            code = compile(source, str(page.path), "exec")
            if sample.module:
                module = _new_module(sample.module, added_modules)
                exec(code, module.__dict__)
            else:
                exec(code, namespace)
            yield sample
    finally:
        for name in reversed(added_modules):
            sys.modules.pop(name, None)


def _run_session(sample: Sample, namespace: dict[str, object]) -> None:
    """A ``>>>`` session: run it as a doctest, so the shown output is checked too.

    ``...`` in an expected output matches anything (ids, times), and runs of
    whitespace compare equal, so a session can be wrapped for reading.
    """
    parser = doctest.DocTestParser()
    test = parser.get_doctest(
        sample.code,
        namespace,
        f"{sample.path.name}:{sample.line}",
        str(sample.path),
        sample.line - 1,
    )
    output: list[str] = []
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
    )
    runner.run(test, out=output.append, clear_globs=False)
    namespace.update(test.globs)  # DocTest copies its globals; later samples need the names
    if runner.failures:
        raise AssertionError("".join(output))


def _new_module(name: str, added: list[str]) -> types.ModuleType:
    """A fresh module ``name`` (and empty parent packages) that imports can find."""
    parts = name.split(".")
    for depth in range(1, len(parts) + 1):
        dotted = ".".join(parts[:depth])
        if dotted in sys.modules and depth < len(parts):
            continue
        module = types.ModuleType(dotted)
        if depth < len(parts):
            module.__path__ = []  # a package, so the child can be imported from it
        sys.modules[dotted] = module
        added.append(dotted)
        if depth > 1:
            setattr(sys.modules[".".join(parts[: depth - 1])], parts[depth - 1], module)
    return sys.modules[name]
