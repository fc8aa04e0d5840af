"""Shared set-up of the benchmarks: a fresh PostgreSQL database per run, then Django.

Each bench runs under tools.testenv (real PostgreSQL, a fresh chDB directory) and must never touch the
developer's database, so it swaps the database name in DATABASE_URL for its own and recreates it.
"""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit, urlunsplit


def use_fresh_database(name: str) -> None:
    """Point DATABASE_URL at a new, empty database `name` on the same server, then set Django up."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        raise ValueError(f"bad database name {name!r}")
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith("postgres"):
        import psycopg

        parts = urlsplit(url)
        os.environ["DATABASE_URL"] = urlunsplit(parts._replace(path=f"/{name}"))
        admin = urlunsplit(parts._replace(path="/postgres"))
        with psycopg.connect(admin.replace("postgres://", "postgresql://", 1), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name}")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
