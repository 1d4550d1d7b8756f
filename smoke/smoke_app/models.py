from django.db import models


class Greeting(models.Model):
    """What the smoke jobs write, so a test can see that a job really ran."""

    text = models.CharField(max_length=100)

    def __str__(self) -> str:
        return self.text
