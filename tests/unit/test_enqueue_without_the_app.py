"""Enqueueing with the app missing from INSTALLED_APPS says what to add, not a LookupError.

A newcomer who decorates a function but forgets the app got "No installed app with
label 'django_arcature'" (before that, a RuntimeError about the model's app_label).
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from tests.testapp.jobs import add

WITHOUT_THE_APP = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "tests.testapp",
]


@override_settings(INSTALLED_APPS=WITHOUT_THE_APP)
def test_enqueue_says_to_install_the_app() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"add 'django_arcature' to INSTALLED_APPS"):
        add.enqueue(1, 2)
    with pytest.raises(ImproperlyConfigured, match=r"then run manage.py migrate"):
        add.enqueue_many([(1, 2)])
