"""Folders only this Unix user can change, and files in them that are provably ours.

Why: the wake-up hint sockets live under a shared temporary folder, where any local
user can create a name first (the folder we meant to make, or a symbolic link to
a folder of ours) or make one open to everybody. A folder is trusted only when
its own entry (``lstat``, never what a link points to) is a real folder owned by
our effective uid and closed to group and others. Every check compares uids: root
may write anywhere, so "can I write here" says nothing about whose folder it is.

A folder's safety also depends on the folder holding it: if another user may
rename entries there, our private folder can be swapped for theirs after we
checked it. A holding folder is trusted if it is ours or root's and, when others
may write in it, has the sticky bit (as ``/tmp`` has), which stops them renaming
or removing what is not theirs.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

__all__ = [
    "UnsafeFolderError",
    "check_holding_folder",
    "check_private_folder",
    "is_own_socket",
    "make_private_folder",
]


class UnsafeFolderError(OSError):
    """A folder that another user controls (or could): it is never used."""

    def __init__(self, path: str | os.PathLike[str], problem: str, fix: str) -> None:
        super().__init__(errno.EPERM, f"{os.fspath(path)} {problem}")
        self.path = os.fspath(path)
        self.problem = problem
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.path} {self.problem}; {self.fix}"


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "is a symbolic link"
    return "is not a folder"


def check_private_folder(path: str | os.PathLike[str]) -> None:
    """Raise ``UnsafeFolderError`` unless ``path`` is our own folder with mode 0700.

    Raises ``FileNotFoundError`` if there is nothing at ``path``.
    """
    info = os.lstat(path)
    uid = os.geteuid()
    fix = (
        f"it must be a folder owned by this user (uid {uid}) with mode 0700, not a symbolic "
        "link. Remove it (if you did not make it, another local user did)"
    )
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeFolderError(path, _kind(info.st_mode), fix)
    if info.st_uid != uid:
        raise UnsafeFolderError(path, f"is owned by uid {info.st_uid}, not by uid {uid}", fix)
    if info.st_mode & 0o077:
        raise UnsafeFolderError(
            path,
            f"has mode {stat.S_IMODE(info.st_mode):04o}, open to other users",
            f"{fix}, or run `chmod 700 {os.fspath(path)}` if it is yours",
        )


def check_holding_folder(path: str | os.PathLike[str]) -> None:
    """Raise ``UnsafeFolderError`` unless no other user can swap the entries in ``path``."""
    info = os.lstat(path)
    uid = os.geteuid()
    fix = (
        "the folder holding the hint folder must be a real folder (not a symbolic link) "
        f"owned by this user (uid {uid}) or root, and if others may write in it, sticky "
        "like /tmp"
    )
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeFolderError(path, _kind(info.st_mode), fix)
    if info.st_uid not in (uid, 0):
        raise UnsafeFolderError(path, f"is owned by uid {info.st_uid}", fix)
    if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
        raise UnsafeFolderError(
            path,
            f"has mode {stat.S_IMODE(info.st_mode):04o}: other users may rename what is in it",
            fix,
        )


def make_private_folder(path: str | os.PathLike[str]) -> None:
    """Create ``path`` with mode 0700 if it is missing, then check it as if it were not new.

    An existing entry is never changed (no ``chmod``, no removal): whoever made it
    is told by the error what to do.
    """
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    check_private_folder(path)


def is_own_socket(path: str | os.PathLike[str], folder: Path | None = None) -> bool:
    """Whether ``path`` is a socket (not a link to one) owned by us, in ``folder`` if given."""
    if folder is not None and Path(path).parent != folder:
        return False
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISSOCK(info.st_mode) and info.st_uid == os.geteuid()
