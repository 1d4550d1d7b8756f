"""The restart test finds the local PostgreSQL cluster instead of assuming version 15."""

from __future__ import annotations

import pytest

from tests.pgcluster import cluster_for

LISTING = """\
15 main 5432 online postgres /var/lib/postgresql/15/main /var/log/postgresql/postgresql-15-main.log
16 main 5433 online postgres /var/lib/postgresql/16/main /var/log/postgresql/postgresql-16-main.log
16 reports 5434 down postgres /var/lib/postgresql/16/reports /var/log/postgresql/x.log
"""


@pytest.mark.parametrize(
    ("major", "port", "expected"),
    [(15, 5432, ("15", "main")), (16, 5433, ("16", "main")), (16, 5434, ("16", "reports"))],
)
def test_the_cluster_is_found_by_version_and_port(
    major: int, port: int, expected: tuple[str, str]
) -> None:
    assert cluster_for(LISTING, major, port) == expected


def test_a_server_that_is_not_a_local_cluster_is_refused_with_the_listing() -> None:
    with pytest.raises(LookupError, match="no local PostgreSQL 17 cluster on port 5432"):
        cluster_for(LISTING, 17, 5432)
    with pytest.raises(LookupError, match="PostgreSQL 16 cluster on port 5432"):
        cluster_for(LISTING, 16, 5432)  # port 5432 is version 15's
