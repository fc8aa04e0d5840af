"""Production settings refuse to be unsafe: no SECRET_KEY, no start; `manage.py check --deploy` reports
nothing with production values (HTTPS behind a TLS-terminating proxy), the docker compose file's
included; development (make run, make test) makes its own key once and speaks plain HTTP.

Each case runs the settings in a fresh process with exactly the environment given (nothing inherited
from the test run, which is development)."""

from __future__ import annotations

import json
import os
import re
import secrets
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import Client, override_settings

from tests.tools.test_docker_files import COMPOSE, interpolate
from treemeter_records import protocol
from treemeter_records.client import INGEST_PATH

yaml = pytest.importorskip("yaml")

REPO_ROOT = Path(__file__).resolve().parents[2]
OLD_BUILT_IN_KEY = "dev-only-insecure-secret-key-change-me-in-production"
SIGNING_KEY = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="


def production_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """What a production deployment sets: servers for both stores, the keys, its host name."""
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", ""),
        # Not reached: the checks run without connecting (no --database).
        "DATABASE_URL": "postgres://treemeter@127.0.0.1:1/treemeter",
        "CLICKHOUSE_URL": "http://default@127.0.0.1:1/treemeter",
        "TREEMETER_SIGNING_KEY": SIGNING_KEY,
        "TREEMETER_DATA_DIR": str(data_dir),
        "ALLOWED_HOSTS": "treemeter.example.com",
        "SECRET_KEY": secrets.token_urlsafe(50),
        **extra,
    }


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


SETTINGS_PRINTER = (
    "import json, sys; sys.path[:0] = ['platform', '.'];"
    "import os; os.environ['DJANGO_SETTINGS_MODULE'] = 'config.settings';"
    "from django.conf import settings;"
    "names = ['ENVIRONMENT', 'SECRET_KEY', 'SECURE_PROXY_SSL_HEADER', 'SECURE_SSL_REDIRECT',"
    " 'SECURE_HSTS_SECONDS', 'SECURE_HSTS_INCLUDE_SUBDOMAINS', 'SECURE_HSTS_PRELOAD',"
    " 'SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE', 'SECURE_REDIRECT_EXEMPT'];"
    "print(json.dumps({n: getattr(settings, n) for n in names}))"
)


def settings_of(env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", SETTINGS_PRINTER],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_check_deploy_reports_nothing_with_production_values(tmp_path: Path) -> None:
    done = manage(production_env(tmp_path), "check", "--deploy", "--fail-level", "WARNING")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues (0 silenced)." in done.stdout, done.stdout + done.stderr
    assert "WARNINGS" not in done.stdout + done.stderr


def test_production_without_secret_key_refuses_to_start(tmp_path: Path) -> None:
    env = production_env(tmp_path)
    del env["SECRET_KEY"]
    done = manage(env, "check")
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and "SECRET_KEY is not set" in done.stderr, done.stderr
    assert not (tmp_path / "secret-key").exists(), "production must not make a key of its own"
    # An empty value is no key either, and neither is a production flag on the embedded database: the
    # refusal comes before anything starts.
    env["SECRET_KEY"] = " "
    assert "SECRET_KEY is not set" in manage(env, "check").stderr
    embedded = {k: v for k, v in env.items() if k != "DATABASE_URL"} | {"TREEMETER_ENV": "production"}
    del embedded["SECRET_KEY"]
    refused = manage(embedded, "check")
    assert refused.returncode != 0 and "SECRET_KEY is not set" in refused.stderr


def test_production_defaults_are_https_behind_a_proxy_and_each_switch_turns_off(tmp_path: Path) -> None:
    values = settings_of(production_env(tmp_path))
    assert values["ENVIRONMENT"] == "production"
    assert values["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert values["SECURE_HSTS_SECONDS"] == 31_536_000
    for name in (
        "SECURE_SSL_REDIRECT",
        "SECURE_HSTS_INCLUDE_SUBDOMAINS",
        "SECURE_HSTS_PRELOAD",
        "SESSION_COOKIE_SECURE",
        "CSRF_COOKIE_SECURE",
    ):
        assert values[name] is True, name
    off = settings_of(
        production_env(
            tmp_path,
            TRUST_X_FORWARDED_PROTO="false",
            SECURE_SSL_REDIRECT="false",
            SECURE_HSTS_SECONDS="0",
            SESSION_COOKIE_SECURE="no",
            CSRF_COOKIE_SECURE="off",
            SECURE_REDIRECT_EXEMPT="^v1/ingest/,^v1/entitlements/",
        )
    )
    assert off["SECURE_PROXY_SSL_HEADER"] is None
    assert (off["SECURE_SSL_REDIRECT"], off["SECURE_HSTS_SECONDS"]) == (False, 0)
    assert (off["SESSION_COOKIE_SECURE"], off["CSRF_COOKIE_SECURE"]) == (False, False)
    assert off["SECURE_REDIRECT_EXEMPT"] == ["^v1/ingest/", "^v1/entitlements/"]


def test_development_makes_its_own_key_once_and_speaks_plain_http(tmp_path: Path) -> None:
    env = production_env(tmp_path, TREEMETER_ENV="development")
    del env["SECRET_KEY"]
    first, again = settings_of(env), settings_of(env)
    key_file = tmp_path / "secret-key"
    assert first["ENVIRONMENT"] == "development"
    assert first["SECRET_KEY"] == again["SECRET_KEY"] == key_file.read_text().strip()
    assert len(first["SECRET_KEY"]) >= 50 and first["SECRET_KEY"] != OLD_BUILT_IN_KEY
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert (first["SECURE_SSL_REDIRECT"], first["SESSION_COOKIE_SECURE"], first["SECURE_HSTS_SECONDS"]) == (
        False,
        False,
        0,
    )
    # Another data dir, another key: nothing shared is built in.
    other = settings_of({**env, "TREEMETER_DATA_DIR": str(tmp_path / "other")})
    assert other["SECRET_KEY"] != first["SECRET_KEY"]


def test_a_bad_environment_name_stops_start_up_naming_the_variable(tmp_path: Path) -> None:
    done = manage(production_env(tmp_path, TREEMETER_ENV="staging"), "check")
    assert done.returncode != 0 and "TREEMETER_ENV='staging' is not valid" in done.stderr


def test_the_compose_files_production_env_passes_check_deploy(tmp_path: Path) -> None:
    """docker/compose.yaml (the production shape) sets what check --deploy asks for."""
    compose = yaml.safe_load(COMPOSE.read_text())
    values = {
        "POSTGRES_PASSWORD": "pgpass123",
        "CLICKHOUSE_PASSWORD": "chpass456",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "TREEMETER_SIGNING_KEY": SIGNING_KEY,
    }
    env = {key: interpolate(str(value), values) for key, value in compose["x-env"].items()}
    env |= {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "")}
    env["TREEMETER_DATA_DIR"] = str(tmp_path)  # the image's /var/lib/treemeter
    assert "TREEMETER_ENV" not in env or env["TREEMETER_ENV"] == "production"
    done = manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout
    # The agent reaches web over plain HTTP inside the compose network: exactly its paths are exempt from
    # the HTTPS redirect, and the healthcheck asks as the proxy would.
    exempt = [re.compile(pattern) for pattern in settings_of(env)["SECURE_REDIRECT_EXEMPT"]]
    agent_paths = [INGEST_PATH, protocol.SNAPSHOT_PATH, protocol.PLATFORM_KEY_PATH, protocol.LEASES_PATH]
    for path in agent_paths:
        assert any(p.search(path.lstrip("/")) for p in exempt), path
    for path in ("/v1/invoices", "/v1/tokens", "/admin/login/", "/login/"):
        assert not any(p.search(path.lstrip("/")) for p in exempt), path
    assert "X-Forwarded-Proto': 'https'" in " ".join(compose["services"]["web"]["healthcheck"]["test"])


@pytest.mark.django_db
def test_behind_the_proxy_http_redirects_https_does_not_and_exempt_paths_answer(settings: Any) -> None:
    """The production switches at work (the suite's own settings are development's)."""
    with override_settings(
        SECURE_SSL_REDIRECT=True,
        SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https"),
        SECURE_HSTS_SECONDS=31_536_000,
        SECURE_HSTS_INCLUDE_SUBDOMAINS=True,
        SECURE_HSTS_PRELOAD=True,
        SECURE_REDIRECT_EXEMPT=[r"^v1/ingest/"],
    ):
        plain = Client().get("/v1/schema", HTTP_HOST="testserver")
        assert (plain.status_code, plain["Location"]) == (301, "https://testserver/v1/schema")
        proxied = Client().get("/v1/entitlements/platform-key", headers={"X-Forwarded-Proto": "https"})
        assert proxied.status_code == 200
        assert proxied["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains; preload"
        exempt = Client().get("/v1/ingest/batches")
        assert exempt.status_code == 405  # answered, not redirected
