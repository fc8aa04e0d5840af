from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings

from clickhouse_store import query
from clickhouse_store.client import close_client, get_client

HOSTILE = "x'; DROP TABLE usage_records; -- \\' \" {tenant:String} %(x)s"


def test_values_are_bound_not_formatted(ch: None) -> None:
    assert query.select("SELECT {s:String}, {n:UInt32} + 1", {"s": HOSTILE, "n": 41}) == [(HOSTILE, 42)]


def test_hostile_value_is_stored_and_read_back_literally(
    ch: None,
    make_record: Callable[..., dict[str, Any]],
    as_values: Callable[[dict[str, Any]], dict[str, Any]],
) -> None:
    values = as_values(make_record(client_request_id=HOSTILE))
    query.insert_rows("usage_records", list(values), [list(values.values())])
    rows = query.select_dicts(
        "SELECT client_request_id, tenant FROM usage_records WHERE client_request_id = {cid:String}",
        {"cid": HOSTILE},
    )
    assert rows == [{"client_request_id": HOSTILE, "tenant": "acme"}]
    query.command(
        "INSERT INTO usage_records (record_id, tenant, client_request_id) "
        "VALUES (generateUUIDv4(), {tenant:String}, {cid:String})",
        {"tenant": HOSTILE, "cid": HOSTILE},
    )
    assert query.select("SELECT count() FROM usage_records WHERE tenant = {t:String}", {"t": HOSTILE}) == [
        (1,)
    ]
    assert query.select(
        "SELECT count() FROM usage_records WHERE client_request_id = {c:String}", {"c": HOSTILE}
    ) == [(2,)]


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        ("SELECT {a:String}", None),
        ("SELECT {a:String}", {"b": "x"}),
        ("SELECT 1", {"a": "x"}),
        ("SELECT %(a)s", {"a": "x"}),
    ],
)
def test_params_must_match_placeholders(sql: str, params: dict[str, Any] | None) -> None:
    with pytest.raises(ValueError, match="placeholders"):
        query.select(sql, params)


@pytest.mark.parametrize("table", ["usage_records; DROP TABLE x", "Usage", "db.usage_records", ""])
def test_table_names_are_checked(table: str) -> None:
    with pytest.raises(ValueError, match="identifier"):
        query.insert_rows(table, ["v"], [[1]])
    with pytest.raises(ValueError, match="identifier"):
        query.insert_json_lines(table, b'{"v": 1}\n')
    with pytest.raises(ValueError, match="identifier"):
        query.insert_rows("usage_records", [table or "-"], [[1]])


def test_empty_dedup_token_is_refused() -> None:
    with pytest.raises(ValueError, match="dedup_token"):
        query.insert_json_lines("usage_records", b'{"v": 1}\n', dedup_token="")


def test_concurrent_calls_from_threads(ch: None) -> None:
    errors: list[BaseException] = []
    results: list[int] = []

    def work(n: int) -> None:
        try:
            for i in range(20):
                ((value,),) = query.select("SELECT {n:UInt32} * 100 + {i:UInt32}", {"n": n, "i": i})
                results.append(value)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(results) == sorted(n * 100 + i for n in range(8) for i in range(20))


@pytest.mark.skipif(not settings.CLICKHOUSE_URL.startswith("chdb:"), reason="chDB path hand-over")
def test_close_client_hands_the_chdb_path_to_another_process(ch: None) -> None:
    first = get_client()
    close_client()
    script = (
        "import sys, clickhouse_connect\n"
        "c = clickhouse_connect.get_client(dsn=sys.argv[1])\n"
        "c.command('INSERT INTO usage_records (record_id, tenant) VALUES (generateUUIDv4(), \\'other\\')')\n"
        "c.close()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, settings.CLICKHOUSE_URL], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert get_client() is not first  # reopened lazily, same path
    assert query.select("SELECT tenant FROM usage_records") == [("other",)]
