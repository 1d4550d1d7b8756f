"""django-modelsearch on a plain Django model (no Wagtail class), run by a real worker.

Saving an ``index.Indexed`` model makes django-modelsearch's own signal handler
enqueue ``insert_or_update_object_task``; until that job runs the database
search backend does not find the object, and after it runs it does, on SQLite
(FTS5) and PostgreSQL (full-text search) alike.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
from modelsearch.backends import get_search_backend

from tests.thirdparty.site.models import Book

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SEARCH_TASK = "modelsearch.tasks.insert_or_update_object_task"


def found(query: str) -> list[int]:
    return [book.pk for book in get_search_backend().search(query, Book)]


def test_saved_books_become_searchable_and_edits_are_reindexed(
    drain: Callable[[], Counter[str]],
) -> None:
    dune = Book.objects.create(title="Dune", blurb="Spice and sandworms on Arrakis")
    Book.objects.create(title="Solaris", blurb="An ocean that thinks")
    assert found("sandworms") == []

    assert drain() == Counter({SEARCH_TASK: 2})
    assert found("sandworms") == [dune.pk]

    dune.blurb = "A desert planet"
    dune.save()
    assert drain() == Counter({SEARCH_TASK: 1})
    assert found("desert") == [dune.pk]
    assert found("sandworms") == []
