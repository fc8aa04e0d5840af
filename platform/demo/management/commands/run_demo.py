"""`make run`: the whole path on embedded defaults — a serving tree of real processes (an L1 router with
its semantic classifier, executors on a tiny MoE in two subtrees) serves requests for several tenants,
packages and SLA classes, then a burst it generates makes its scheduler borrow and scale; the signed
records are ingested and invoiced."""

from __future__ import annotations

import itertools
import threading
import time
from argparse import ArgumentParser
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO, cast

import httpx
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from billing.business_events import business_events
from billing.models import Invoice
from billing.presentation import invoice_table
from billing.selectors import invoice_with_lines
from billing.services import generate_invoice
from clickhouse_store.migrator import apply_migrations
from clickhouse_store.queries.records import count_records, layer_latencies
from common.money import round_money
from compute_agents.checkpoint import read_manifest
from contracts.models import Contract
from demo.events import EVENT_PACKAGE, EVENT_UNIT, MIN_TOKENS, seed_event_package
from demo.factory import build_demo_package
from demo.history import backfill, seed_terms
from demo.sandbox import demo_sandbox, simulate_events
from demo.server import start_api_server
from demo.services import DemoSetup, ensure_admin, seed_demo
from demo.tree import BATCH, REPLICA, RunningTree, model_dir, start_tree
from sandbox.models import Sandbox
from sandbox.selectors import projected_invoice, sandbox_metrics
from scheduling.models import SchedulerEvent

BURST_SENDERS = 6
EVENTS = 8  # contract review events sent, one or two calls each
SANDBOX_EVENTS = 12  # the sandbox simulator's events sent during the run
BURST_LIMIT_S = 90
SETTLE_LIMIT_S = 45  # after the burst: the loan returned (held 10 s) and the replica stopped
PROMPTS = (
    "Review the payment clause: the party shall pay each invoice within thirty days.",
    "合同审查：付款条款与责任条款是否一致？",
    "Match the patient record to the diagnosis report from the hospital.",
    "Summarise the liability and indemnity terms of the agreement.",
    "患者诊断报告摘要",
)


class Command(BaseCommand):
    help = "Run the demo: a real agent serves requests, its records are ingested and invoiced; serve the API."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--requests", type=int, default=60, help="Requests sent through the agent.")
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000, help="0 picks a free port.")
        parser.add_argument("--no-serve", action="store_true", help="Exit after printing the invoices.")
        parser.add_argument(
            "--history-days",
            type=int,
            default=30,
            help="Days of signed usage sent before the live run (once per data dir); 0 for none.",
        )
        parser.add_argument(
            "--burst",
            type=int,
            default=BURST_LIMIT_S,
            help="Seconds at most of the burst that makes the scheduler borrow and scale; 0 for none.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        console = Console(file=cast(TextIO, self.stdout), width=110)
        if options["requests"] < 1:
            raise CommandError("--requests must be positive.")
        period_start = datetime.now(UTC).replace(microsecond=0)
        with console.status("Preparing PostgreSQL and ClickHouse schemas…"):
            call_command("migrate", verbosity=0)
            apply_migrations()
            setup = seed_demo(settings.DATA_DIR)
            model_id = str(read_manifest(model_dir(settings.DATA_DIR))["model_id"])
            event_key = seed_event_package(setup.contract, model_id)
            seed_terms()
            sandbox = demo_sandbox(setup.contract)  # on packages with plans on sale (seed_terms)
            built = build_demo_package(setup.tenant.code)
            admin_user, admin_password = ensure_admin(settings.DATA_DIR)
        console.print(f"Data in {settings.DATA_DIR}  ·  ClickHouse {settings.CLICKHOUSE_URL}")
        try:
            server, url = start_api_server(options["host"], options["port"])
        except OSError as error:
            raise CommandError(
                f"Cannot listen on {options['host']}:{options['port']}: {error}. Try --port 0."
            ) from None
        console.print(f"Platform API at {url}")
        quote = built.quote
        console.print(
            f"Package factory: {built.package.code} ({built.tenant.code}'s own) built from the "
            f"{built.template} template in {built.build_seconds} s; {quote['seconds_per_event']} s of "
            f"compute per event measured; base fee {quote['formula']}  ·  {url}/factory/{built.package.code}"
        )
        with console.status("Starting the serving tree: an L1 router and three executors (tiny Qwen3-MoE)…"):
            tree = start_tree(setup, url, options["host"])
        stopped = False
        try:
            executors = tree.get("/tree/executors")
            card = executors["executors"][0]
            console.print(
                f"L1 router {executors['router']} at {tree.url} (node {executors['node']})  ·  executors "
                + ", ".join(e["executor"] for e in executors["executors"])
                + f"  ·  model {card['model_id']}"
            )
            if options["history_days"] > 0:
                self._history(console, setup, url, options["history_days"], tree.model)
            self._send_requests(console, setup, tree, options["requests"])
            self._send_events(console, tree, event_key)
            self._sandbox_traffic(console, tree, sandbox)
            if options["burst"] > 0:
                self._burst(console, setup, tree, options["burst"])
            self._tree_summary(console, tree.get("/tree/stats"))
            tree.stop()
            stopped = True
            console.print("Spools drained: every record signed and acknowledged by the platform")
            if options["burst"] > 0:
                run = SchedulerEvent.objects.filter(at__gte=period_start)
                stored = Counter(run.values_list("kind", flat=True))
                console.print(
                    "Scheduler events of this run stored by the platform (staff: /finance/scheduler/): "
                    + ", ".join(f"{kind} {n}" for kind, n in sorted(stored.items()))
                )
            self._hop_latencies(console, period_start)
            self._invoice(console, setup, period_start)
            self._sandbox_preview(console, sandbox)
        finally:
            if not stopped:
                tree.stop()
        console.print(f"Admin: {url}/admin/  user {admin_user}  password {admin_password}")
        console.print(f"API docs: {url}/v1/docs  ·  the tree's logs: {tree.log_dir}")
        if options["no_serve"]:
            server.shutdown()
            return
        console.print("Serving the platform API; press Ctrl-C to stop.")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            server.shutdown()

    def _history(
        self, console: Console, setup: DemoSetup, url: str, days: int, model: tuple[str, str]
    ) -> None:
        with console.status(f"Sending {days} days of signed usage history, then SLA reports and invoices…"):
            history = backfill(setup, url, datetime.now(UTC), days, model)
        sent = f"{history.records:,} records signed and ingested" if history.records else "already ingested"
        console.print(f"History ({days} days before today): {sent}")
        for report in history.sla_reports:
            console.print(
                f"  SLA {report.contract.code} {report.month}: {report.valid_count:,} valid requests, "
                f"service credit {report.credit_percent.normalize():f} % ({report.status})"
            )
        for invoice in history.invoices:
            console.print(
                f"  Invoice {invoice.number or '(draft)'} {invoice.contract.code} "
                f"{invoice.period_start:%Y-%m}: {invoice.total} {invoice.currency}, "
                f"{invoice.record_count:,} records"
            )

    def _send_requests(self, console: Console, setup: DemoSetup, tree: RunningTree, count: int) -> None:
        """A mix over tenants, SLA classes and both endpoints, plus a bad key and a malformed body."""
        statuses: dict[int, int] = {}
        keys = itertools.cycle(setup.keys)
        prompts = itertools.cycle(PROMPTS)
        columns = [
            TextColumn("Requests through the L1 router"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        ]
        with (
            httpx.Client(base_url=tree.url, timeout=60) as client,
            Progress(*columns, console=console) as bar,
        ):
            task = bar.add_task("requests", total=count + 2)
            for index in range(count):
                key, prompt = next(keys), next(prompts)
                headers = {"Authorization": f"Bearer {key.secret}", "X-Request-Id": f"demo-{index}"}
                if index % 3 == 2:
                    body: dict[str, Any] = {
                        "model": "tiny",
                        "messages": [{"role": "user", "content": prompt}],
                        "max_tokens": 12,
                    }
                    answer = client.post("/v1/chat/completions", json=body, headers=headers)
                else:
                    body = {"model": "tiny", "prompt": prompt, "max_tokens": 8 + index % 16}
                    answer = client.post("/v1/completions", json=body, headers=headers)
                statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
                bar.advance(task)
            unknown = client.post(
                "/v1/completions",
                json={"model": "tiny", "prompt": "x"},
                headers={"Authorization": "Bearer tmk_not-a-key"},
            )
            malformed = client.post(
                "/v1/completions",
                json={"model": "tiny"},
                headers={"Authorization": f"Bearer {setup.keys[0].secret}"},
            )
            for answer in (unknown, malformed):
                statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
                bar.advance(task)
        console.print(
            "Router answers: "
            + ", ".join(f"{n} × HTTP {code}" for code, n in sorted(statuses.items()))
            + "  (401: unknown key, no record; 400: malformed, an unbilled 'rejected' record)"
        )
        if statuses.get(200) != count:
            raise CommandError(f"Only {statuses.get(200, 0)} of {count} requests were served.")

    def _send_events(self, console: Console, tree: RunningTree, key: str) -> None:
        """Contract review events through the L1 router, each one or two calls with one event id (the
        `X-Request-Id`), decoded greedily: a long enough answer is accepted; a too short one fails
        acceptance, unless the event's second call is accepted."""
        with httpx.Client(base_url=tree.url, timeout=60) as client:
            for number in range(EVENTS):
                tokens = (12,) if number % 4 else (2, 12) if number % 8 else (2,)
                for max_tokens in tokens:
                    prompt = PROMPTS[number % 2]
                    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
                    headers = {"Authorization": f"Bearer {key}", "X-Request-Id": f"review-{number}"}
                    answer = client.post("/v1/completions", json=body, headers=headers)
                    if answer.status_code != 200:
                        raise CommandError(f"Event review-{number}: HTTP {answer.status_code} {answer.text}")
        console.print(
            f"Business events: {EVENTS} contract reviews sent under package {EVENT_PACKAGE} "
            f"(each accepted when an answer has ≥ {MIN_TOKENS} tokens)"
        )

    def _sandbox_traffic(self, console: Console, tree: RunningTree, sandbox: Sandbox) -> None:
        sent = simulate_events(sandbox, tree.url, SANDBOX_EVENTS, datetime.now(UTC))
        console.print(
            f"Sandbox {sandbox.contract.code} ({sandbox.tenant.code}, packages "
            f"{', '.join(p.code for p in sandbox.contract.held_packages())}): the simulator sent "
            f"{sent.events} of its {sandbox.daily_events} events a day through the L1 router with the "
            "sandbox's own keys ("
            + ", ".join(f"{n} × HTTP {code}" for code, n in sorted(sent.statuses.items()))
            + ")"
        )
        if sent.statuses.get(200) != sent.calls:
            raise CommandError(f"The sandbox's calls were not all served: {sent.statuses}")

    def _sandbox_preview(self, console: Console, sandbox: Sandbox) -> None:
        """The sandbox's figures and its projected invoice: a preview, in no production figure."""
        now = datetime.now(UTC)
        metrics = sandbox_metrics(sandbox, now)
        projection = projected_invoice(sandbox, [], now)
        rate = "—" if metrics.acceptance_rate is None else f"{metrics.acceptance_rate:.2%}"
        console.print(
            f"Sandbox figures of {metrics.month}: response time p50 {metrics.p50_ms:.0f} ms, p99 "
            f"{metrics.p99_ms:.0f} ms  ·  acceptance {rate} of {metrics.events} events  ·  volume "
            f"{metrics.records} calls (stored apart: in no invoice, SLA report, usage figure or export)"
        )
        title = f"Projected invoice {projection.month} (preview; usage so far × {projection.factor})"
        table = Table(title=title)
        for column in ("Line", "Quantity", "Unit price", f"Amount ({projection.currency})"):
            table.add_column(column, justify="left" if column == "Line" else "right")
        for line in projection.invoice.lines:
            table.add_row(line.description, f"{line.quantity:,.2f}", f"{line.unit_price:f}", f"{line.amount}")
        table.add_row("Total", "", "", f"{projection.invoice.total}")
        console.print(table)
        if Invoice.objects.filter(contract=sandbox.contract).exists():
            raise CommandError("A sandbox contract has an invoice.")

    def _events_billed(
        self, console: Console, contract: Contract, invoice: Invoice, start: datetime, end: datetime
    ) -> None:
        """The events report beside the invoice's event line: one figure."""
        report = business_events(contract, start, end)
        counts = next(p.counts for p in report.packages if p.package == EVENT_PACKAGE)
        line = invoice.lines.get(dimension=EVENT_UNIT)
        console.print(
            f"Business events of {contract.code}: billable {counts['billable']}, failed acceptance "
            f"{counts['failed_acceptance']}, partial {counts['partial']}  ·  invoice line "
            f"{line.description}: {line.quantity.normalize():f} × {line.unit_price:.2f} = "
            f"{line.amount} {invoice.currency} (the line lists {len(line.details['events'])} events)"
        )
        if line.quantity != counts["billable"] or len(line.details["events"]) != counts["billable"]:
            raise CommandError(f"The invoice bills {line.quantity} events; the report counts {counts}.")

    def _burst(self, console: Console, setup: DemoSetup, tree: RunningTree, limit_s: int) -> None:
        """Batch requests from BURST_SENDERS at once, until the scheduler has lent subtree batch an
        executor of default and the autoscaler's replica has passed its warm-up and joined; then quiet,
        until the loan is returned and the replica stopped. Prints the events as the router logged them."""
        key = next(k for k in setup.keys if k.sla_class == "batch")
        headers = {"Authorization": f"Bearer {key.secret}"}
        statuses: Counter[int] = Counter()
        lock, stop = threading.Lock(), threading.Event()

        def send(sender: int) -> None:
            with httpx.Client(base_url=tree.url, timeout=120) as client:
                for number in itertools.count():
                    if stop.is_set():
                        return
                    body = {"model": "tiny", "prompt": PROMPTS[number % len(PROMPTS)], "max_tokens": 32}
                    request_id = {"X-Request-Id": f"burst-{sender}-{number}"}
                    answer = client.post("/v1/completions", json=body, headers={**headers, **request_id})
                    with lock:
                        statuses[answer.status_code] += 1

        def kinds() -> set[str]:
            scheduler = tree.get("/tree/scheduler")
            return {e["kind"] for e in scheduler["recent"] if e["subtree"] == "batch"}

        def joined() -> bool:
            return bool(tree.get("/tree/scheduler")["replicas"]["batch"]["heard"] > len(BATCH))

        began = time.monotonic()
        senders = [threading.Thread(target=send, args=(n,), daemon=True) for n in range(BURST_SENDERS)]
        with console.status(f"Burst: {BURST_SENDERS} batch requests at once until the scheduler moves…"):
            for thread in senders:
                thread.start()
            while time.monotonic() - began < limit_s and not ({"borrow", "scale_up"} <= kinds() and joined()):
                time.sleep(0.5)
            # Read while the burst lasts: once the replica is scaled down again it is no longer heard.
            replica_joined = joined()
            stop.set()
            for thread in senders:
                thread.join()
        burst_s = time.monotonic() - began
        with console.status("Burst over: waiting for the loan's return and the scale-down…"):
            quiet = time.monotonic()
            while time.monotonic() - quiet < SETTLE_LIMIT_S and not {"return", "scale_down"} <= kinds():
                time.sleep(0.5)
        console.print(
            f"Burst: {sum(statuses.values())} batch requests in {burst_s:.0f} s ("
            + ", ".join(f"{n} × HTTP {code}" for code, n in sorted(statuses.items()))
            + f"); the replica {REPLICA} {'joined' if replica_joined else 'did not join'} subtree batch"
        )
        scheduler = tree.get("/tree/scheduler")
        first = min((e["at_ns"] for e in scheduler["recent"]), default=0)
        for event in scheduler["recent"]:
            moved = f" {event['executor']} from {event['lender']}" if event.get("lender") else ""
            console.print(
                f"  +{(event['at_ns'] - first) / 1e9:5.1f} s  {event['kind']:<10} {event['subtree']}{moved}: "
                f"{event['reason']}"
            )
        if not {"borrow", "scale_up"} <= kinds():
            raise CommandError(f"The burst ({burst_s:.0f} s) made no borrow and scale-up; see {tree.log_dir}")

    def _tree_summary(self, console: Console, stats: dict[str, Any]) -> None:
        def counts(title: str, values: dict[str, int]) -> None:
            console.print(f"  {title}: " + ", ".join(f"{k} {n}" for k, n in sorted(values.items())))

        console.print("Serving tree:")
        counts("requests per executor", stats["by_executor"])
        counts("per domain (classifier)", stats["by_domain"])
        counts("per path", stats["by_path"])
        decision = stats["decision_us"]
        console.print(
            f"  L1 decision: p50 {decision['p50'] / 1000:.2f} ms, p99 {decision['p99'] / 1000:.2f} ms "
            f"over {decision['count']} ({stats['early_exits']} of {stats['decisions']} decided on the "
            f"encoder's first layers)  ·  failovers {stats['failovers']}  ·  unserved {stats['unserved']}"
        )

    def _hop_latencies(self, console: Console, period_start: datetime) -> None:
        latencies = layer_latencies(period_start, datetime.now(UTC) + timedelta(seconds=1))
        console.print(
            "  hop latency per layer (served records, p50 / p99): "
            + ", ".join(
                f"{layer} {p50 / 1000:.1f} / {p99 / 1000:.1f} ms" for layer, (p50, p99) in latencies.items()
            )
        )

    def _invoice(self, console: Console, setup: DemoSetup, period_start: datetime) -> None:
        period_end = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
        while datetime.now(UTC) < period_end:
            time.sleep(0.05)
        for contract in setup.contracts:
            records, served = count_records(contract.code, period_start, period_end)
            invoice = invoice_with_lines(generate_invoice(contract.pk, period_start, period_end).pk)
            console.print(invoice_table(invoice))
            console.print(
                f"ClickHouse: {records} records for {contract.code} in this run, {served} served (billed)"
            )
            if contract == setup.contract:
                self._events_billed(console, contract, invoice, period_start, period_end)
            mismatched = [
                line
                for line in invoice.lines.all()
                if line.amount != round_money(line.quantity * line.unit_price, invoice.currency)
            ]
            if mismatched or invoice.record_count != records:
                raise CommandError(
                    f"Invoice check failed for {contract.code}: lines {mismatched}, "
                    f"records {invoice.record_count} on the invoice vs {records} stored."
                )
        console.print(
            "[green]Check: every line amount = quantity × unit price (rounded); records all invoiced.[/]"
        )
