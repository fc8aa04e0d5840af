"""Applies the ClickHouse migrations of `clickhouse_migrations/` and records them in ClickHouse.

Applied migrations are rows of the `clickhouse_migrations` table (name, checksum, applied_at), in the
same ClickHouse as the data, so a fresh chDB directory or server starts from nothing. A migration's
checksum is the SHA-256 of the statements it generates for the configured cluster; if an applied
migration now generates different statements, the migrator refuses to run (MigrationError).

One migrator at a time: within a process the client lock serializes it; run it from one process
(deploy step, `make run`, the test session's setup).
"""

from __future__ import annotations

import hashlib
import importlib
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings

from . import query
from .client import locked_client
from .schema import MIGRATIONS_TABLE, check_identifier, migrations_table_ddl

MIGRATIONS_PACKAGE = "clickhouse_store.clickhouse_migrations"
_NAME = re.compile(r"^\d{4}_[a-z0-9_]+$")


class MigrationError(Exception):
    """The migrations on disk and those recorded in ClickHouse disagree."""


@dataclass(frozen=True)
class Migration:
    name: str
    description: str
    operations: Callable[[str], list[str]]

    def statements(self, cluster: str) -> list[str]:
        return list(self.operations(cluster))

    def checksum(self, cluster: str) -> str:
        return hashlib.sha256("\n;\n".join(self.statements(cluster)).encode()).hexdigest()


def load_migrations(package: str = MIGRATIONS_PACKAGE) -> list[Migration]:
    """The migrations of `package`, in name order."""
    root = importlib.import_module(package)
    names = sorted(info.name for info in pkgutil.iter_modules(root.__path__) if not info.name.startswith("_"))
    migrations = []
    for name in names:
        if not _NAME.match(name):
            raise MigrationError(
                f"{package}.{name}: migration modules are named NNNN_<what> (e.g. 0002_add_x)"
            )
        module = importlib.import_module(f"{package}.{name}")
        operations = getattr(module, "operations", None)
        description = getattr(module, "description", None)
        if not callable(operations) or not isinstance(description, str):
            raise MigrationError(f"{package}.{name} must define `description: str` and `operations(cluster)`")
        migrations.append(Migration(name=name, description=description, operations=operations))
    return migrations


def _cluster(cluster: str | None) -> str:
    name = settings.CLICKHOUSE_CLUSTER if cluster is None else cluster
    return check_identifier(name) if name else ""


def applied_migrations(cluster: str | None = None) -> dict[str, str]:
    """{name: checksum} of the applied migrations (creates the record table if missing)."""
    query.command(migrations_table_ddl(_cluster(cluster)))
    rows = query.select(f"SELECT name, checksum FROM {MIGRATIONS_TABLE} ORDER BY name")  # noqa: S608
    return {name: checksum for name, checksum in rows}


def migration_status(cluster: str | None = None) -> list[tuple[Migration, bool]]:
    """Every migration on disk with whether it is applied."""
    applied = applied_migrations(cluster)
    return [(migration, migration.name in applied) for migration in load_migrations()]


def apply_migrations(cluster: str | None = None) -> list[str]:
    """Apply pending migrations in order; the names applied ([] when up to date).

    `cluster` defaults to settings.CLICKHOUSE_CLUSTER ("" = one node). Raises MigrationError, before
    applying anything, when an applied migration's checksum changed or its module is gone.
    """
    cluster = _cluster(cluster)
    with locked_client():
        applied = applied_migrations(cluster)
        migrations = load_migrations()
        on_disk = {migration.name for migration in migrations}
        missing = sorted(set(applied) - on_disk)
        if missing:
            raise MigrationError(
                f"ClickHouse has migrations applied that are not in the code: {', '.join(missing)}. "
                "The database is newer than this code."
            )
        for migration in migrations:
            recorded = applied.get(migration.name)
            if recorded is not None and recorded != migration.checksum(cluster):
                raise MigrationError(
                    f"ClickHouse migration {migration.name} was applied with checksum {recorded}, but its "
                    f"statements now give {migration.checksum(cluster)}. Applied migrations must not change: "
                    "restore it and add a new migration for the change."
                )
        done = []
        for migration in migrations:
            if migration.name in applied:
                continue
            for statement in migration.statements(cluster):
                query.command(statement)
            query.insert_rows(
                MIGRATIONS_TABLE,
                ["name", "checksum", "applied_at"],
                [[migration.name, migration.checksum(cluster), datetime.now(UTC)]],
            )
            done.append(migration.name)
        return done
