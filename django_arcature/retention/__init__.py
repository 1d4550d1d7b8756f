"""Retention: deleting finished jobs (succeeded, cancelled, dead) after a configured age."""
