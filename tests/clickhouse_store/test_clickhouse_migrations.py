from __future__ import annotations

import importlib

import pytest
from django.core.management import CommandError, call_command

from clickhouse_store import query
from clickhouse_store.migrator import MigrationError, apply_migrations, load_migrations

FIRST = "0001_usage_records"


def _recorded() -> list[tuple[str, str]]:
    return [
        (name, checksum)
        for name, checksum in query.select("SELECT name, checksum FROM clickhouse_migrations")
    ]


def test_migrations_apply_in_order_once_and_are_recorded(ch: None) -> None:
    query.command("DROP TABLE IF EXISTS usage_records")
    query.command("DROP TABLE IF EXISTS clickhouse_migrations")
    migrations = load_migrations()
    assert [m.name for m in migrations] == sorted(m.name for m in migrations)
    assert migrations[0].name == FIRST

    assert apply_migrations() == [m.name for m in migrations]
    assert sorted(_recorded()) == sorted((m.name, m.checksum("")) for m in migrations)
    assert query.select("EXISTS TABLE usage_records") == [(1,)]

    assert apply_migrations() == []
    assert len(_recorded()) == len(migrations)


def test_command_reports_up_to_date_and_lists(ch: None, capsys: pytest.CaptureFixture[str]) -> None:
    call_command("migrate_clickhouse")
    assert "ClickHouse schema is up to date." in capsys.readouterr().out
    call_command("migrate_clickhouse", "--list")
    assert f"[X] {FIRST}" in capsys.readouterr().out


def test_command_prints_each_migration_applied(ch: None, capsys: pytest.CaptureFixture[str]) -> None:
    query.command("DROP TABLE clickhouse_migrations")
    call_command("migrate_clickhouse")
    assert f"Applied {FIRST}: usage_records" in capsys.readouterr().out


def test_changed_checksum_is_refused(ch: None, monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module(f"clickhouse_store.clickhouse_migrations.{FIRST}")
    original = module.operations
    monkeypatch.setattr(module, "operations", lambda cluster: [*original(cluster), "SELECT 1"])
    with pytest.raises(MigrationError, match=f"{FIRST} was applied with checksum"):
        apply_migrations()
    with pytest.raises(CommandError, match="Applied migrations must not change"):
        call_command("migrate_clickhouse")


def test_unknown_applied_migration_is_refused(ch: None) -> None:
    query.command(
        "INSERT INTO clickhouse_migrations (name, checksum, applied_at) VALUES ('9999_future', 'x', now64(3))"
    )
    try:
        with pytest.raises(MigrationError, match="9999_future"):
            apply_migrations()
    finally:
        query.command("DELETE FROM clickhouse_migrations WHERE name = {name:String}", {"name": "9999_future"})
    assert apply_migrations() == []
