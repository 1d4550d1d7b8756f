try:
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task  # type: ignore[no-redef]

from .models import Greeting


@task
def shout(words: list[str]) -> str:
    text = " ".join(words).upper()
    Greeting.objects.create(text=text)
    return text
