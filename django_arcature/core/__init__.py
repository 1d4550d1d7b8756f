"""The pure rules: deciding an outcome, backoff, payload checks, stored text.

Nothing here imports ``django.db`` or the models; the clock and randomness come
in as arguments, so every branch is a table test.
"""
