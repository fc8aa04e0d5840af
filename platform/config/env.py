"""The one reader of settings from the environment.

Every value comes through here, so a bad value fails at start with a message that names the
variable, what it holds and what was expected, instead of surfacing later as a confusing error.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

REPO_ROOT = Path(__file__).resolve().parents[2]


class EnvError(ImproperlyConfigured):
    def __init__(self, name: str, value: str, expected: str) -> None:
        super().__init__(f"{name}={value!r} is not valid: expected {expected}.")


def text(name: str, default: str) -> str:
    return os.environ.get(name, default)


def boolean(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise EnvError(name, raw, "one of 1/0, true/false, yes/no, on/off")


def integer(name: str, default: int, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise EnvError(name, raw, "an integer") from None
    if minimum is not None and value < minimum:
        raise EnvError(name, raw, f"an integer >= {minimum}")
    return value


def csv_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def data_dir() -> Path:
    path = Path(os.environ.get("TREEMETER_DATA_DIR") or REPO_ROOT / "var").resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class DatabaseConfig:
    """Either a PostgreSQL server (`postgres://…`, or `postgres://user@/db?host=/socket/dir`)
    or the embedded one (`embedded` or unset)."""

    embedded: bool
    name: str = ""
    user: str = ""
    password: str = ""
    host: str = ""
    port: str = ""


def database(name: str = "DATABASE_URL") -> DatabaseConfig:
    raw = os.environ.get(name, "").strip()
    if raw in {"", "embedded", "embedded:"}:
        return DatabaseConfig(embedded=True)
    parts = urlsplit(raw)
    if parts.scheme not in {"postgres", "postgresql"}:
        raise EnvError(name, raw, "postgres://user:password@host:port/dbname, or 'embedded'")
    dbname = parts.path.lstrip("/")
    if not dbname:
        raise EnvError(
            name, raw, "a database name in the path, e.g. postgres://postgres@127.0.0.1:5432/treemeter"
        )
    try:
        port = parts.port
    except ValueError:
        raise EnvError(name, raw, "a numeric port") from None
    socket_dir = parse_qs(parts.query).get("host", [""])[0]
    return DatabaseConfig(
        embedded=False,
        name=unquote(dbname),
        user=unquote(parts.username or "postgres"),
        password=unquote(parts.password or ""),
        host=socket_dir or parts.hostname or "127.0.0.1",
        port="" if socket_dir else str(port or 5432),
    )


def clickhouse_url(name: str = "CLICKHOUSE_URL") -> str:
    raw = os.environ.get(name, "").strip()
    if raw == "":
        return f"chdb://{data_dir() / 'clickhouse'}"
    scheme = urlsplit(raw).scheme
    if scheme == "chdb":
        if not raw.startswith("chdb:///"):
            raise EnvError(name, raw, "an absolute path, e.g. chdb:///var/lib/treemeter/clickhouse")
        return raw
    if scheme in {"http", "https"}:
        return raw
    raise EnvError(name, raw, "chdb:///<path> or http(s)://user:password@host:port/database")


def broker_url(name: str = "CELERY_BROKER_URL") -> str:
    """Empty means no broker: tasks run in-process (the embedded default)."""
    raw = os.environ.get(name, "").strip()
    if raw and urlsplit(raw).scheme not in {"redis", "rediss", "redis+socket", "amqp", "amqps", "memory"}:
        raise EnvError(name, raw, "redis://host:port/db, amqp://…, or empty to run tasks in-process")
    return raw


def choice(name: str, default: str, allowed: tuple[str, ...]) -> str:
    raw = os.environ.get(name, "").strip()
    if raw == "":
        return default
    if raw not in allowed:
        raise EnvError(name, raw, "one of " + ", ".join(allowed))
    return raw


def created_once(path: Path, make: Callable[[], str]) -> str:
    """The text in `path`, written once (mode 0600) with `make()` by the first process that needs it."""
    if not path.exists():
        # Written aside, then linked into place: processes starting together (web and worker, test
        # workers) all end up reading the one complete file that was linked first.
        path.parent.mkdir(parents=True, exist_ok=True)
        aside = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(make())
        try:
            os.link(aside, path)
        except FileExistsError:
            pass
        finally:
            aside.unlink()
    return path.read_text().strip()


def secret_key(name: str, fallback_file: Path, *, development: bool) -> str:
    """Django's SECRET_KEY. Unset: in development a random key created once in `fallback_file`; in
    production the platform refuses to start (a key anyone could know would let them forge sessions)."""
    raw = os.environ.get(name, "").strip()
    if raw:
        return raw
    if not development:
        raise ImproperlyConfigured(
            f"{name} is not set. In production (TREEMETER_ENV=production, the default with a DATABASE_URL) "
            f"the platform does not start without it; set {name} to a long random value, e.g. the output "
            "of: python -c 'import secrets; print(secrets.token_urlsafe(50))'."
        )
    return created_once(fallback_file, lambda: secrets.token_urlsafe(50))


def ed25519_seed(name: str, fallback_file: Path) -> bytes:
    """A 32-byte Ed25519 private seed, base64. Unset: read (or create once) `fallback_file`."""
    raw = os.environ.get(name, "").strip()
    if raw == "":
        raw = created_once(fallback_file, lambda: base64.b64encode(os.urandom(32)).decode())
        name = f"{name} (from {fallback_file})"
    try:
        seed = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise EnvError(name, raw[:8] + "…", "base64 of a 32-byte Ed25519 private key") from None
    if len(seed) != 32:
        raise EnvError(name, raw[:8] + "…", "base64 of exactly 32 bytes")
    return seed
