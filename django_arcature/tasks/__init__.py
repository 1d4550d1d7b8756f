"""The ``django.tasks`` backend: ``@task`` code stored in the job table and run by our worker.

Nothing here is imported unless a project uses the tasks framework (Django 6's
``django.tasks`` or the ``django-tasks`` backport), which this package does not require.
"""
