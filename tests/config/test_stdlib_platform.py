"""`platform/` is a folder of packages: the standard library's `platform` must win everywhere."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import sysconfig
import uuid
from pathlib import Path

import pytest

from tests.worker import ROOT, celery_worker

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def test_in_pytest_platform_is_the_standard_library() -> None:
    assert Path(platform.__file__).parent == STDLIB
    assert platform.system() == os.uname().sysname
    assert uuid.uuid4().version == 4  # uuid calls platform.system() on import


def test_in_manage_py_platform_is_the_standard_library() -> None:
    out = (
        subprocess.run(
            [
                sys.executable,
                "manage.py",
                "shell",
                "-c",
                "import platform, django.conf; "
                "print(platform.system(), platform.__file__, django.conf.settings.ROOT_URLCONF)",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        .stdout.splitlines()[-1]
        .split()
    )
    assert out == [os.uname().sysname, str(STDLIB / "platform.py"), "config.urls"]


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_in_a_celery_worker_platform_is_the_standard_library(redis_url: str) -> None:
    with celery_worker(redis_url) as worker:
        info = worker.app.send_task("treemeter.runtime_info", queue=worker.queue).get(timeout=90)
    assert info["platform_system"] == os.uname().sysname
    assert Path(info["platform_module"]) == STDLIB / "platform.py"
