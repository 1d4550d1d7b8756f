"""Which database the suite runs on: ``ARCATURE_TEST_DB`` (sqlite, postgres, mysql) or
``DATABASE_URL``. Kept tiny so the tests and the example project need no extra package."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

DEFAULT_URLS = {
    "sqlite": "sqlite:///var/arcature-tests.sqlite3",
    "postgres": "postgres://arcature:arcature@127.0.0.1:5432/arcature",
    "mysql": "mysql://arcature:arcature@127.0.0.1:3306/arcature",
}

ENGINES = {
    "sqlite": "django.db.backends.sqlite3",
    "postgres": "django.db.backends.postgresql",
    "postgresql": "django.db.backends.postgresql",
    "mysql": "django.db.backends.mysql",
    "mariadb": "django.db.backends.mysql",
}


def database_url() -> str:
    """``DATABASE_URL`` if set; else the local server named by ``ARCATURE_TEST_DB``,
    with the database name from ``ARCATURE_DB_NAME`` (so parallel runs do not share one)."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    kind = os.environ.get("ARCATURE_TEST_DB", "sqlite")
    if kind not in DEFAULT_URLS:
        raise SystemExit(f"ARCATURE_TEST_DB={kind!r}: use one of {', '.join(DEFAULT_URLS)}")
    url = DEFAULT_URLS[kind]
    name = os.environ.get("ARCATURE_DB_NAME")
    if name:
        suffix = ".sqlite3" if kind == "sqlite" else ""
        url = url.rsplit("/", 1)[0] + "/" + name + suffix
    return url


def parse(url: str, base_dir: Path) -> dict[str, Any]:
    """``scheme://user:password@host:port/name`` → a Django DATABASES entry."""
    parts = urlsplit(url)
    scheme = parts.scheme.split("+")[0]
    if scheme not in ENGINES:
        raise SystemExit(f"unsupported database URL scheme {scheme!r} in {url!r}")
    if scheme == "sqlite":
        path = Path(unquote(parts.path.removeprefix("/")))
        path = path if path.is_absolute() else base_dir / path
        path.parent.mkdir(parents=True, exist_ok=True)
        return {
            "ENGINE": ENGINES[scheme],
            "NAME": str(path),
            "TEST": {"NAME": str(path.with_name("test-" + path.name))},
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    config: dict[str, Any] = {
        "ENGINE": ENGINES[scheme],
        "NAME": unquote(parts.path.removeprefix("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }
    if scheme in ("mysql", "mariadb"):
        config["OPTIONS"] = {"charset": "utf8mb4"}
        config["TEST"] = {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"}
    return config
