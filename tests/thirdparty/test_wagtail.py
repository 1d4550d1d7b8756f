"""Wagtail's own background tasks on ArcatureBackend, run by a real worker process.

Wagtail enqueues through ``django_tasks.task`` (the backport, which on Django 6
builds its tasks with the backend's own task class): publishing a page or
uploading an image enqueues django-modelsearch's search-index task (in
``modelsearch.tasks``: a package that is not itself in INSTALLED_APPS, since
``wagtail.search``'s AppConfig subclasses its config) and Wagtail's
reference-index task; deleting an image, a rendition or a document enqueues,
from ``transaction.on_commit``, ``delete_file_from_storage_task(
storage.deconstruct(), name)``, whose first argument is a tuple. Each test
checks the effect the package promises once its jobs ran: the search index
finds the page, the reference index links it to its image, the file is gone.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from django.core.files.storage import default_storage
from wagtail.documents import get_document_model
from wagtail.images import get_image_model
from wagtail.models import Collection, Locale, Page, ReferenceIndex

from tests.thirdparty.images import png, text_file
from tests.thirdparty.site.models import ArticlePage

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SEARCH_TASK = "modelsearch.tasks.insert_or_update_object_task"
REFERENCE_TASK = "wagtail.tasks.update_reference_index_task"
DELETE_FILE_TASK = "wagtail.tasks.delete_file_from_storage_task"

Drain = Callable[[], Counter[str]]


@pytest.fixture(autouse=True)
def root() -> Page:
    """The page and collection roots and the locale, as Wagtail's migrations make
    them (a transactional test's flush removes that data after the first test)."""
    Locale.objects.get_or_create(language_code="en")
    if Collection.get_first_root_node() is None:
        Collection.add_root(name="Root")
    found = Page.get_first_root_node()
    return found if found is not None else Page.add_root(title="Root", slug="root")


def publish(parent: Page, **fields: object) -> ArticlePage:
    page = ArticlePage(**fields)
    parent.add_child(instance=page)
    page.save_revision().publish()
    return page


def found_pages(query: str) -> list[int]:
    return [page.pk for page in ArticlePage.objects.live().search(query)]


def test_publish_indexes_the_page_for_search_and_its_image_reference(
    root: Page, drain: Drain
) -> None:
    image = get_image_model().objects.create(title="Northern aurora", file=png("aurora.png"))
    page = publish(root, title="Airships", slug="airships", body="A zeppelin", hero_image=image)
    # Until the jobs run, neither index knows the page.
    assert found_pages("zeppelin") == []
    assert not ReferenceIndex.get_references_to(image).exists()

    ran = drain()

    assert ran[SEARCH_TASK] >= 2, ran  # the image and the page
    assert ran[REFERENCE_TASK] >= 2, ran
    assert found_pages("zeppelin") == [page.pk]
    assert [i.pk for i in get_image_model().objects.search("aurora")] == [image.pk]
    referrers = ReferenceIndex.get_references_to(image).values_list("object_id", flat=True)
    assert str(page.pk) in set(referrers)


def test_edited_page_is_reindexed_with_its_new_text(root: Page, drain: Drain) -> None:
    page = publish(root, title="Craft", slug="craft", body="A zeppelin")
    drain()
    page.body = "A blimp"
    page.save_revision().publish()
    assert found_pages("blimp") == []

    ran = drain()

    assert ran[SEARCH_TASK] >= 1, ran
    assert found_pages("blimp") == [page.pk]
    assert found_pages("zeppelin") == []


# Wagtail's rendition code leaves a SpooledTemporaryFile for the garbage collector;
# that one warning is Wagtail's, collected here so it cannot land in another test.
@pytest.mark.filterwarnings("ignore:Unclosed file <tempfile.SpooledTemporaryFile:ResourceWarning")
def test_deleting_an_image_deletes_its_file_and_renditions_from_storage(drain: Drain) -> None:
    image = get_image_model().objects.create(title="Harbour", file=png("harbour.png", "navy"))
    rendition = image.get_rendition("fill-16x16")
    gc.collect()
    files = [image.file.name, rendition.file.name]
    assert all(default_storage.exists(name) for name in files)
    drain()

    image.delete()  # the rendition goes with it; both files are left to the jobs
    assert all(default_storage.exists(name) for name in files)

    ran = drain()

    assert ran[DELETE_FILE_TASK] == 2, ran
    assert not any(default_storage.exists(name) for name in files)
    assert not any(Path(default_storage.path(name)).exists() for name in files)


def test_deleting_a_document_deletes_its_file_from_storage(drain: Drain) -> None:
    document = get_document_model().objects.create(
        title="Timetable", file=text_file("timetable.txt", "08:15 departs")
    )
    name = document.file.name
    ran = drain()
    assert ran[SEARCH_TASK] >= 1, ran
    assert [d.pk for d in get_document_model().objects.search("timetable")] == [document.pk]

    document.delete()
    assert default_storage.exists(name)

    ran = drain()

    assert ran == Counter({DELETE_FILE_TASK: 1})
    assert not default_storage.exists(name)
