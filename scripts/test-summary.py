"""Print the test counts of every tox environment from its JUnit XML report.

``tox run-parallel`` hides the output of environments that pass; this table
shows, per Python, Django and database, how many tests ran, passed, failed and
were skipped, and ends with one total line.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def counts(report: Path) -> tuple[int, int, int, int, float]:
    root = ET.parse(report).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    tests = failed = skipped = 0
    seconds = 0.0
    for suite in suites:
        tests += int(suite.get("tests", 0))
        failed += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped += int(suite.get("skipped", 0))
        seconds += float(suite.get("time", 0.0))
    return tests, tests - failed - skipped, failed, skipped, seconds


def main(folder: str) -> int:
    reports = sorted(Path(folder).glob("*.xml"))
    if not reports:
        print(f"no JUnit reports in {folder}: no test ran")
        return 1
    total = [0, 0, 0]
    print(f"{'environment':<30}{'tests':>7}{'passed':>8}{'failed':>8}{'skipped':>9}{'seconds':>9}")
    for report in reports:
        tests, passed, failed, skipped, seconds = counts(report)
        total[0] += passed
        total[1] += failed
        total[2] += skipped
        print(f"{report.stem:<30}{tests:>7}{passed:>8}{failed:>8}{skipped:>9}{seconds:>9.1f}")
    print(f"total: {total[0]} passed, {total[1]} failed, {total[2]} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "var/junit"))
