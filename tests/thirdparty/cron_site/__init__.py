"""A site app with a task django-crontask schedules (Django 6: crontask needs django.tasks)."""
