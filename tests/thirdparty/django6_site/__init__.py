"""The site's tasks for packages that need ``django.tasks`` itself (Django 6):
django-crontask schedules one, django-tasks-monitor records them all."""
