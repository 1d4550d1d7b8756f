"""Measuring the queue on a real database: ``manage.py arcature_bench`` and ``benchmarks/``.

The measuring code lives in the package (not only in the repository's
``benchmarks/``) so users can run the same measurements on their own database.
"""
