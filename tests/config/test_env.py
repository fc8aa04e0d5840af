"""The settings reader: good values parse, bad ones fail with a message naming the variable."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from config import env


def test_database_url_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgres://u:p%40ss@db.internal:6543/billing")
    assert env.database() == env.DatabaseConfig(False, "billing", "u", "p@ss", "db.internal", "6543")
    monkeypatch.setenv("DATABASE_URL", "postgres://postgres@/treemeter?host=/run/pg")
    assert env.database() == env.DatabaseConfig(False, "treemeter", "postgres", "", "/run/pg", "")
    monkeypatch.delenv("DATABASE_URL")
    assert env.database().embedded


@pytest.mark.parametrize(
    ("name", "value", "reader"),
    [
        ("DATABASE_URL", "mysql://x/y", env.database),
        ("DATABASE_URL", "postgres://host:5432", env.database),
        ("DATABASE_URL", "postgres://host:port/db", env.database),
        ("CLICKHOUSE_URL", "tcp://ch:9000", env.clickhouse_url),
        ("CLICKHOUSE_URL", "chdb://relative/path", env.clickhouse_url),
        ("CELERY_BROKER_URL", "kafka://x", env.broker_url),
    ],
)
def test_bad_urls_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, reader: object
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(env.EnvError, match=name):
        reader()  # type: ignore[operator]


def test_booleans_integers_and_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_FLAG", "yes")
    monkeypatch.setenv("X_INT", "42")
    monkeypatch.setenv("X_HOSTS", "a.example, b.example,")
    assert env.boolean("X_FLAG", False) is True
    assert env.integer("X_INT", 1, minimum=1) == 42
    assert env.csv_list("X_HOSTS", []) == ["a.example", "b.example"]
    monkeypatch.setenv("X_FLAG", "maybe")
    with pytest.raises(env.EnvError, match="X_FLAG='maybe'"):
        env.boolean("X_FLAG", False)
    monkeypatch.setenv("X_INT", "0")
    with pytest.raises(env.EnvError, match="X_INT"):
        env.integer("X_INT", 1, minimum=1)


def test_signing_key_is_created_once_then_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TREEMETER_SIGNING_KEY", raising=False)
    key_file = tmp_path / "key"
    first = env.ed25519_seed("TREEMETER_SIGNING_KEY", key_file)
    assert len(first) == 32 and env.ed25519_seed("TREEMETER_SIGNING_KEY", key_file) == first
    assert key_file.stat().st_mode & 0o777 == 0o600
    monkeypatch.setenv("TREEMETER_SIGNING_KEY", base64.b64encode(b"short").decode())
    with pytest.raises(env.EnvError, match="32 bytes"):
        env.ed25519_seed("TREEMETER_SIGNING_KEY", key_file)
