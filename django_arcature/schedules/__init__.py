"""Periodic schedules: one job per cron slot across the fleet, decided by the database."""
