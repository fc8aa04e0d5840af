from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from agents.models import Agent
from agents.services import AgentRegistrationError, register_agent


class Command(BaseCommand):
    help = "Register an agent's Ed25519 public key and bind it to tenants and contracts."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("agent_id")
        parser.add_argument(
            "--public-key", required=True, help="Base64 of the raw 32-byte Ed25519 public key."
        )
        parser.add_argument("--tenant", action="append", default=[], dest="tenants")
        parser.add_argument("--contract", action="append", default=[], dest="contracts")
        parser.add_argument("--host-class", default="")
        parser.add_argument(
            "--kind",
            choices=Agent.Kind.values,
            default=Agent.Kind.EXECUTOR,
            help="router: an L1 router, whose key signs the routing decisions in its executors' records",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["tenants"] and not options["contracts"]:
            raise CommandError("Bind the agent to at least one --tenant or --contract.")
        try:
            key = register_agent(
                agent_id=options["agent_id"],
                public_key_b64=options["public_key"],
                tenant_codes=options["tenants"],
                contract_codes=options["contracts"],
                host_class=options["host_class"],
                kind=options["kind"],
            )
        except AgentRegistrationError as error:
            raise CommandError(f"{error.code}: {error.message}") from None
        self.stdout.write(f"registered {options['kind']} {options['agent_id']} key {key.key_id}")
