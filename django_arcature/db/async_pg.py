"""PostgreSQL from async code: psycopg's own async connection, one per event loop and alias.

Django's async ORM runs every query in a worker thread (``sync_to_async``), so
an ``await aenqueue()`` there pays a thread hand-off and back for one INSERT. An
enqueue from async code has no caller's transaction to join (Django's
``atomic()`` is sync-only), so its INSERT can just as well go on a connection of
its own in autocommit, driven by the event loop: psycopg 3's
``AsyncConnection``, opened with the parameters Django's own connection for the
alias uses (the same adapters, time zone, role, binding mode), so values go in
and come back exactly as through the ORM. One connection per event loop and
database alias, kept while the loop lives; psycopg serialises the queries of
concurrent coroutines on it. A connection that failed is dropped and the next
enqueue opens a new one. Statements are single autocommit INSERTs (and with
Django's default client-side binding nothing is prepared), so this also works
behind PgBouncer in transaction pooling.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncIterator
from typing import Any

from django.db import connections

logger = logging.getLogger(__name__)

__all__ = ["aclose_all", "as_django_error", "async_connection", "discard", "supports_native_async"]

#: Per event loop, per alias: its open connection.
_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Any]] = (
    weakref.WeakKeyDictionary()
)


def supports_native_async(using: str) -> bool:
    """PostgreSQL under psycopg 3 (psycopg2 has no async connection)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return False
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return bool(is_psycopg3)


def _params(using: str) -> tuple[dict[str, Any], str | None, str | None]:
    """The keyword arguments of ``AsyncConnection.connect`` for ``using``, the role to
    assume and the time zone to set, as Django's connection for the alias does."""
    import psycopg
    from django.db.backends.postgresql.base import ServerBindingCursor

    wrapper = connections[using]
    params = dict(wrapper.get_connection_params())
    factory = params.pop("cursor_factory", None)
    server_binding = isinstance(factory, type) and issubclass(factory, ServerBindingCursor)
    params["cursor_factory"] = psycopg.AsyncCursor if server_binding else psycopg.AsyncClientCursor
    params["autocommit"] = True
    options = wrapper.settings_dict.get("OPTIONS", {})
    return params, options.get("assume_role"), wrapper.timezone_name


async def async_connection(using: str) -> Any:
    """This event loop's open connection for ``using`` (opened on first use)."""
    loop = asyncio.get_running_loop()
    per_alias = _by_loop.setdefault(loop, {})
    kept = per_alias.get(using)
    if kept is not None and not kept[0].closed:
        return kept[0]
    import psycopg

    params, role, zone = _params(using)
    connection = await psycopg.AsyncConnection.connect(**params)
    try:
        if role:
            await connection.execute(
                psycopg.sql.SQL("SET ROLE {}").format(psycopg.sql.Identifier(role))
            )
        if zone and connection.info.parameter_status("TimeZone") != zone:
            await connection.execute("SELECT set_config('TimeZone', %s, false)", [zone])
    except BaseException:
        await connection.close()
        raise
    keeper = _closed_with_the_loop(connection)
    await keeper.__anext__()
    per_alias[using] = (connection, keeper)
    return connection


async def _closed_with_the_loop(connection: Any) -> AsyncIterator[None]:
    """Closes ``connection`` when the loop finalises its async generators (``asyncio.run``
    and asgiref's ``async_to_sync`` do before closing it), or drops this one."""
    try:
        yield
    finally:
        await connection.close()


async def discard(using: str) -> None:
    """Close and forget this loop's connection for ``using`` (after it failed)."""
    loop = asyncio.get_running_loop()
    kept = _by_loop.get(loop, {}).pop(using, None)
    if kept is not None:
        try:
            await kept[1].aclose()  # closes the connection
        except Exception:  # already broken: nothing more to release
            logger.debug("closing a failed async connection", exc_info=True)


async def aclose_all() -> None:
    """Close this loop's connections now (a test between loops, a shutdown hook)."""
    for using in list(_by_loop.get(asyncio.get_running_loop(), {})):
        await discard(using)


def as_django_error(exc: BaseException) -> BaseException:
    """psycopg's error as Django's (``IntegrityError`` for a unique violation ...), as
    Django's cursor raises it; the sync connection of the alias is left unmarked,
    since it is not the one that failed."""
    import psycopg
    from django.db import utils

    for name in (
        "DataError",
        "OperationalError",
        "IntegrityError",
        "InternalError",
        "ProgrammingError",
        "NotSupportedError",
        "DatabaseError",
        "InterfaceError",
        "Error",
    ):
        if isinstance(exc, getattr(psycopg, name)):
            error: BaseException = getattr(utils, name)(*exc.args)
            return error
    return exc
