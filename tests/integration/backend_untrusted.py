"""A module outside every installed app and outside OPTIONS["MODULES"].

A job row naming it must not make a worker import it (test_backend.py checks
that it never appears in ``sys.modules``).
"""

IMPORTED = True
