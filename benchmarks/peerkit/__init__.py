"""One adapter per queue for benchmarks/peers.py, each run in its own interpreter.

Every module here but :mod:`.harness` and :mod:`.stamp` imports one queue library
at module level, so only the child process measuring that queue imports it.
"""
