"""Schemathesis against the live /v1/schema, bounded: no 5xx, no answer outside the schema, malformed
input refused. The full run is `make schemathesis` (tools/schemathesis_run.py); this one keeps to a few
examples per operation so that it fits in the test suite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from drf_spectacular.settings import spectacular_settings
from rest_framework.throttling import AnonRateThrottle, UserRateThrottle

from tools import schemathesis_run

pytestmark = [
    pytest.mark.schemathesis,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("clickhouse"),
]

MAX_EXAMPLES = 4
# Fuzzing draws valid and malformed input alike; the exhaustive coverage phase is the full run's.
PHASES = "fuzzing"
SEED = 20261202


def test_the_api_keeps_to_its_schema(
    live_server: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Rate limits have their own tests; here they would only turn the run's later requests into 429s.
    monkeypatch.setitem(AnonRateThrottle.THROTTLE_RATES, "anon", "1000000/min")
    monkeypatch.setitem(UserRateThrottle.THROTTLE_RATES, "user", "1000000/min")
    hook_registered = schemathesis_run.error_hook_registered()
    if not hook_registered:  # reported below; meanwhile the rest of the run still means something
        hooks = schemathesis_run.hooks_with_error_hook()
        monkeypatch.setattr(spectacular_settings, "POSTPROCESSING_HOOKS", hooks, raising=False)
    token = schemathesis_run.seed_tenants()

    outcomes = [
        schemathesis_run.run_schemathesis(
            live_server.url,
            label,
            token=credential,
            max_examples=MAX_EXAMPLES,
            seed=SEED,
            report_dir=tmp_path,
            extra=selection,
            phases=PHASES,
        )
        for label, credential, selection in schemathesis_run.runs(token)
    ]

    for outcome in outcomes:
        print(f"===== schemathesis: {outcome.label} (exit {outcome.returncode}) =====\n{outcome.output}")
    assert hook_registered, schemathesis_run.MISSING_HOOK
    assert [(o.label, o.returncode) for o in outcomes] == [(o.label, 0) for o in outcomes]
