"""Schemathesis against the live API's OpenAPI spec: zero 5xx and zero schema violations is the target.

    python -m tools.testenv -- .venv/bin/python -m tools.schemathesis_run [--max-examples N] [--seed S]

In one process (chDB allows one per data path): a throwaway test database (Django's test database
creation, on the PostgreSQL that tools.testenv provides), ClickHouse migrations, two tenants with a complete
data set (tests/schemathesis/tenant_data.py), and the platform served on 127.0.0.1 from a thread. Then
`st run` (the schemathesis CLI, a subprocess) tests every operation of /v1/schema as the first tenant's
owner (an API token in the Authorization header) and unauthenticated, with positive and negative
(malformed) inputs. It prints every run's summary and exits non-zero when any run failed.

Rate limits are raised for the run (they are tested on their own); nothing else is changed.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
ERROR_HOOK = "config.errors.document_error_responses"
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
)


MISSING_HOOK = f"SPECTACULAR_SETTINGS['POSTPROCESSING_HOOKS'] lacks {ERROR_HOOK}: added for this run only."


@dataclass(frozen=True)
class Outcome:
    label: str
    returncode: int
    output: str


def _django() -> None:
    for path in (REPO_ROOT / "verifier", REPO_ROOT / "platform", REPO_ROOT):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("API_RATE_USER", "1000000/min")
    os.environ.setdefault("API_RATE_ANON", "1000000/min")
    import django

    django.setup()


def error_hook_registered() -> bool:
    """Whether settings register the hook that documents error answers (config.errors)."""
    from django.conf import settings

    return ERROR_HOOK in settings.SPECTACULAR_SETTINGS.get("POSTPROCESSING_HOOKS", [])


def hooks_with_error_hook() -> list[Any]:
    """drf-spectacular's postprocessing hooks plus config.errors.document_error_responses."""
    from drf_spectacular.settings import spectacular_settings

    from config.errors import document_error_responses

    return [*spectacular_settings.POSTPROCESSING_HOOKS, document_error_responses]


def ensure_error_hook() -> bool:
    """As error_hook_registered(); when it is not, the hook is added to drf-spectacular's live settings
    for the rest of this process (without it every 4xx answer reads as a schema violation)."""
    from drf_spectacular.settings import spectacular_settings

    if error_hook_registered():
        return True
    spectacular_settings.POSTPROCESSING_HOOKS = hooks_with_error_hook()  # type: ignore[attr-defined]
    return False


@contextmanager
def test_database() -> Iterator[None]:
    """A fresh PostgreSQL test database and migrated ClickHouse, dropped at the end."""
    from django.db import connection
    from django.test.utils import setup_test_environment, teardown_test_environment

    from clickhouse_store.migrator import apply_migrations

    setup_test_environment()
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        apply_migrations()
        yield
    finally:
        connection.close()
        connection.creation.destroy_test_db(old_name, verbosity=0)
        teardown_test_environment()


@contextmanager
def live_server() -> Iterator[str]:
    """The platform's WSGI application on 127.0.0.1 (an ephemeral port), served from threads."""
    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
    from django.core.wsgi import get_wsgi_application

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadedWSGIServer(("127.0.0.1", 0), QuietHandler, allow_reuse_address=False)
    server.set_app(get_wsgi_application())
    # Every 4xx is logged as a warning, and schemathesis sends thousands on purpose; 5xx still are.
    # (Set after the application loads: loading it configures logging again.)
    logging.getLogger("django.request").setLevel(logging.ERROR)
    thread = threading.Thread(target=server.serve_forever, name="schemathesis-live-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def run_schemathesis(
    base_url: str,
    label: str,
    *,
    token: str | None,
    max_examples: int,
    seed: int,
    report_dir: Path,
    extra: Sequence[str] = (),
    phases: str = "examples,coverage,fuzzing",
) -> Outcome:
    """`st run` against the live schema, as `label`; its whole output is kept."""
    command = [
        str(Path(sys.executable).with_name("st")),
        "--no-color",
        "run",
        f"{base_url}/v1/schema",
        "--checks",
        ",".join(CHECKS),
        "--mode",
        "all",
        "--phases",
        phases,
        "--max-examples",
        str(max_examples),
        "--seed",
        str(seed),
        "--workers",
        "1",
        "--suppress-health-check",
        "all",
        "--request-timeout",
        "60",
        "--report",
        "junit",
        "--report-junit-path",
        str(report_dir / f"schemathesis-{label}.xml"),
        "--output-truncate",
        "true",
    ]
    if token is not None:
        command += ["--header", f"Authorization: Bearer {token}"]
    command += list(extra)
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=1800)
    return Outcome(label, done.returncode, done.stdout + done.stderr)


def seed_tenants() -> str:
    """Two tenants with complete data sets; the first one's owner API token."""
    from accounts.models import Role
    from tests.schemathesis.tenant_data import build_tenant

    owner = build_tenant("alpha")
    build_tenant("bravo")
    return owner.tokens[Role.OWNER]


# An owner may revoke the tenant's own tokens, the run's credential among them (schemathesis reuses the
# prefixes GET /v1/tokens lists): that operation is tested last, on its own.
SELF_REVOKING = "^/v1/tokens/[^/]+/revoke$"


def runs(token: str) -> list[tuple[str, str | None, list[str]]]:
    """(label, API token or None, `st run` operation selection) of each run, in order."""
    return [
        ("owner-token", token, ["--exclude-path-regex", SELF_REVOKING]),
        ("owner-token-revoke", token, ["--include-path-regex", SELF_REVOKING]),
        ("anonymous", None, []),
    ]


def run(max_examples: int, seed: int, report_dir: Path, extra: Sequence[str] = ()) -> list[Outcome]:
    """The whole run (Django must be set up): database, seed data, server, both schemathesis runs."""
    report_dir.mkdir(parents=True, exist_ok=True)
    outcomes: list[Outcome] = []
    if not ensure_error_hook():
        outcomes.append(Outcome("configuration", 1, MISSING_HOOK))
    with test_database():
        token = seed_tenants()
        with live_server() as base_url:
            for label, credential, selection in runs(token):
                outcomes.append(
                    run_schemathesis(
                        base_url,
                        label,
                        token=credential,
                        max_examples=max_examples,
                        seed=seed,
                        report_dir=report_dir,
                        extra=[*selection, *extra],
                    )
                )
    return outcomes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--max-examples", type=int, default=25, help="test cases per operation and phase")
    parser.add_argument("--seed", type=int, default=20261202)
    parser.add_argument(
        "--report-dir",
        type=Path,
        default=REPO_ROOT / "var" / "test-output" / "schemathesis",
        help="JUnit reports go here",
    )
    parser.add_argument("st_args", nargs="*", help="passed on to `st run` (after --)")
    options = parser.parse_args(argv)
    _django()
    outcomes = run(options.max_examples, options.seed, options.report_dir, options.st_args)
    for outcome in outcomes:
        print(f"===== schemathesis: {outcome.label} (exit {outcome.returncode}) =====")
        print(outcome.output.rstrip())
    failed = [o.label for o in outcomes if o.returncode != 0]
    print(f"===== summary: {len(outcomes) - len(failed)} passed, failed: {', '.join(failed) or 'none'} =====")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
