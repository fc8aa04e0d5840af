"""Starting a real worker in a test must not turn the project's tasks in this process non-eager."""

from __future__ import annotations

import pytest

from billing.tasks import generate_invoice_task
from contracts.models import Contract
from tests.worker import celery_worker


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_shared_tasks_stay_eager_after_a_worker_test(redis_url: str) -> None:
    with celery_worker(redis_url) as worker:
        assert worker.app.send_task("treemeter.runtime_info", queue=worker.queue).get(timeout=90)
    with pytest.raises(Contract.DoesNotExist):  # eager: runs and raises here, instead of queueing on Redis
        generate_invoice_task.delay("no-such-contract", "2026-11")
