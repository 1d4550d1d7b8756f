"""Which Debian/Ubuntu PostgreSQL cluster (``pg_ctlcluster VERSION NAME``) the tests talk to.

The restart test used to name cluster ``15 main``; a machine with PostgreSQL 16 (or
a second cluster on another port) would then restart the wrong server or fail. The
server itself says its major version and port, and ``pg_lsclusters`` lists the local
clusters with theirs, so the right one is found rather than assumed.
"""

from __future__ import annotations

import subprocess
from typing import Any


def cluster_for(listing: str, major: int, port: int) -> tuple[str, str]:
    """The ``(version, name)`` of the cluster in ``pg_lsclusters -h`` output on ``port``.

    ``major`` is the server's ``server_version_num // 10000``; a cluster whose
    version differs is not the server we are connected to, even on the same port.
    """
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) < 3 or not fields[2].isdigit():
            continue
        version, name, cluster_port = fields[0], fields[1], int(fields[2])
        if cluster_port == port and version.split(".")[0] == str(major):
            return version, name
    raise LookupError(
        f"no local PostgreSQL {major} cluster on port {port} in pg_lsclusters:\n{listing}"
    )


def connected_cluster(connection: Any) -> tuple[str, str]:
    """The local cluster behind a Django PostgreSQL ``connection``."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version_num")
        major = int(cursor.fetchone()[0]) // 10000
        cursor.execute("SHOW port")
        port = int(cursor.fetchone()[0])
    listing = subprocess.run(
        ["pg_lsclusters", "-h"], check=True, capture_output=True, text=True, timeout=30
    ).stdout
    return cluster_for(listing, major, port)
