"""Say how many documentation samples ran and how many are shown only, and why."""

from __future__ import annotations

import pytest

from docs import samples


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    shown = [s for page in samples.pages() for s in page.samples if s.action == "not-run"]
    setups = sum(1 for s in samples.executed if s.action == "setup")
    terminalreporter.write_sep(
        "-",
        f"docs samples: {len(samples.executed) - setups} executed (+{setups} hidden setups), "
        f"{len(shown)} shown only",
    )
    for sample in shown:
        where = sample.path.relative_to(samples.DOCS.parent)
        terminalreporter.write_line(f"  not run {where}:{sample.line}: {sample.reason}")
