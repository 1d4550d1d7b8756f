from django_arcature import Permanent, job

from .models import Greeting


@job
def greet(name: str) -> str:
    Greeting.objects.create(text=f"hello {name}")
    return name.upper()


@job(max_attempts=1)
def refuse(reason: str) -> None:
    raise Permanent(reason)
