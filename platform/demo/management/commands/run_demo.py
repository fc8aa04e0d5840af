"""`make run`: the whole path on embedded defaults — seed, sign and send batches, invoice, serve."""

from __future__ import annotations

import time
from argparse import ArgumentParser
from decimal import Decimal
from typing import Any, TextIO, cast

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db.models import Max
from django.utils import timezone
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from billing.models import Invoice
from billing.periods import month_bounds, previous_month
from billing.presentation import invoice_table
from billing.selectors import invoice_with_lines
from billing.tasks import generate_invoice_task
from clickhouse_store.migrator import apply_migrations
from compute_agents.synthetic import Workload, synthetic_records
from contracts.money import round_money
from demo.server import start_api_server
from demo.services import DemoSetup, ensure_admin, seed_demo
from ingest.models import SequenceRange
from treemeter_records import IngestClient, build_batch, private_key_from_seed


class Command(BaseCommand):
    help = "Run the demo: seed, send signed batches through the ingest API, invoice, and serve the API."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--records", type=int, default=5_000)
        parser.add_argument("--batch-size", type=int, default=1_000)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000, help="0 picks a free port.")
        parser.add_argument("--month", help="YYYY-MM, a closed month (default: the previous month).")
        parser.add_argument("--no-serve", action="store_true", help="Exit after printing the invoice.")

    def handle(self, *args: Any, **options: Any) -> None:
        console = Console(file=cast(TextIO, self.stdout), width=110)
        month = options["month"] or previous_month(timezone.now())
        try:
            start, end = month_bounds(month)
        except ValueError as error:
            raise CommandError(str(error)) from None
        if options["records"] < 1 or options["batch_size"] < 1:
            raise CommandError("--records and --batch-size must be positive.")

        with console.status("Preparing PostgreSQL and ClickHouse schemas…"):
            call_command("migrate", verbosity=0)
            apply_migrations()
            setup = seed_demo(settings.DATA_DIR)
            admin_user, admin_password = ensure_admin(settings.DATA_DIR)
        console.print(f"Data in {settings.DATA_DIR}  ·  ClickHouse {settings.CLICKHOUSE_URL}")
        try:
            server, url = start_api_server(options["host"], options["port"])
        except OSError as error:
            raise CommandError(
                f"Cannot listen on {options['host']}:{options['port']}: {error}. Try --port 0."
            ) from None
        console.print(f"API listening at {url}")

        invoiced = Invoice.objects.filter(contract=setup.contract, period_start=start, period_end=end).first()
        if invoiced is None:
            self._send_records(console, setup, url, options["records"], options["batch_size"], start, end)
            invoice_id = generate_invoice_task.delay(setup.contract.code, month).get()
        else:
            console.print(f"[yellow]{month} is already invoiced in this data dir; showing that invoice.[/]")
            invoice_id = invoiced.pk

        invoice = invoice_with_lines(invoice_id)
        console.print(invoice_table(invoice))
        mismatched = [
            line
            for line in invoice.lines.all()
            if line.amount != round_money(line.quantity * line.unit_price, invoice.currency)
        ]
        total_ok = invoice.total == sum((line.amount for line in invoice.lines.all()), Decimal(0))
        if mismatched or not total_ok:
            raise CommandError(f"Invoice check failed: lines {mismatched}, total ok {total_ok}.")
        console.print(
            "[green]Check: every line amount = quantity × unit price (rounded to 0.01), total = Σ lines.[/]"
        )
        console.print(f"Admin: {url}/admin/  user {admin_user}  password {admin_password}")
        console.print(f"Invoice JSON: {url}/v1/invoices/{invoice.pk}  ·  API docs: {url}/v1/docs")
        if options["no_serve"]:
            server.shutdown()
            return
        console.print("Serving; press Ctrl-C to stop.")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            server.shutdown()

    def _send_records(
        self, console: Console, setup: DemoSetup, url: str, count: int, batch_size: int, start: Any, end: Any
    ) -> None:
        workload = Workload(
            agent_id=setup.agent_id,
            tenant=setup.tenant.code,
            contract=setup.contract.code,
            package=setup.package.code,
        )
        last = SequenceRange.objects.filter(agent__agent_id=setup.agent_id).aggregate(m=Max("last_seq"))["m"]
        first_seq = 0 if last is None else last + 1
        records = list(
            synthetic_records(
                workload,
                first_seq=first_seq,
                count=count,
                start_ns=int(start.timestamp()) * 1_000_000_000,
                end_ns=int(end.timestamp()) * 1_000_000_000,
            )
        )
        key = private_key_from_seed(setup.agent_seed)
        client = IngestClient(url)
        totals = {"accepted": 0, "duplicate": 0, "rejected": 0}
        columns = [
            TextColumn("Sending signed batches"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        ]
        with Progress(*columns, console=console) as progress:
            task = progress.add_task("send", total=count)
            for offset in range(0, count, batch_size):
                chunk = records[offset : offset + batch_size]
                answer = client.send(build_batch(chunk, setup.agent_id, key))
                for name in totals:
                    totals[name] += getattr(answer, name)
                progress.advance(task, len(chunk))
        console.print(
            f"Ingest: {totals['accepted']} accepted, {totals['duplicate']} duplicate, "
            f"{totals['rejected']} rejected"
        )
