"""Run every runnable Python sample of the documentation (see ``samples.py`` for the marks).

Run by tox's ``docs`` environment against the example project's settings and a
SQLite test database:
``PYTHONPATH=example_project pytest docs --ds=demo_site.settings``.
One test per page, so the samples of a page can build on each other.
"""

from __future__ import annotations

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
def test_page_samples_run(page: samples.Page, record_property: pytest.RecordProperty) -> None:
    ran = list(samples.run(page))
    record_property("samples", len(ran))
    samples.executed.extend(ran)
    assert len(ran) == len(page.runnable)
