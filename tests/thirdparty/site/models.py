"""Models that give the packages' own signal handlers something to do.

``ArticlePage`` is a Wagtail page: saving it makes Wagtail enqueue its
reference-index task and django-modelsearch its search-index task; its hero image
is a reference the index must record. ``Book`` is a plain Django model indexed
by django-modelsearch alone, with no Wagtail class in between.
"""

from __future__ import annotations

from django.db import models
from modelsearch import index
from wagtail.models import Page


class ArticlePage(Page):  # type: ignore[misc]  # Wagtail has no type information
    body = models.TextField(blank=True)
    hero_image = models.ForeignKey(
        "wagtailimages.Image",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    search_fields = [*Page.search_fields, index.SearchField("body")]


class Book(index.Indexed, models.Model):  # type: ignore[misc]  # no type information
    title = models.CharField(max_length=200)
    blurb = models.TextField(blank=True)

    search_fields = [index.SearchField("title"), index.SearchField("blurb")]

    def __str__(self) -> str:
        return self.title
