"""How long the wake-up hint folder's path may be: a Unix socket path is short.

On Linux a socket's path must fit in ``sun_path``, 108 bytes with its final NUL,
so 107 bytes of path. Inside ``WAKE_HINT_DIR`` a worker's socket is
``/<20-character database digest>/<pid>-<8 hex>.sock``; a pid has at most 7
digits (``pid_max`` is at most 4194304), so that part is 43 bytes and the folder
itself may have 64. Kept apart from ``hints`` so the settings' validation can use
it without importing the socket code.
"""

from __future__ import annotations

#: The longest path a Unix socket can bind to on Linux, in bytes.
SOCKET_PATH_MAX_BYTES = 107
#: The characters of the database digest naming the folder inside the base folder.
DIGEST_CHARS = 20
#: ``<pid>-<8 hex>.sock`` with the longest pid.
SOCKET_NAME_MAX_BYTES = 7 + 1 + 8 + len(".sock")
#: What a worker adds to ``WAKE_HINT_DIR``: ``/<digest>/<socket name>``.
ADDED_BYTES = 1 + DIGEST_CHARS + 1 + SOCKET_NAME_MAX_BYTES
#: The longest ``WAKE_HINT_DIR`` (in bytes, as the file system sees it) that always fits.
WAKE_HINT_DIR_MAX_BYTES = SOCKET_PATH_MAX_BYTES - ADDED_BYTES
