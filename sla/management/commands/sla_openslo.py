"""Export a policy's objectives as OpenSLO v1 YAML, or replace them from a YAML file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from sla.models import SlaPolicy
from sla.openslo import OpenSloError, export_policy, import_policy


class Command(BaseCommand):
    help = "sla_openslo export <policy id> | sla_openslo import <policy id> <file.yaml>"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["export", "import"])
        parser.add_argument("policy", type=int, help="SlaPolicy id")
        parser.add_argument("file", nargs="?", help="the YAML file to import")

    def handle(self, *args: Any, **options: Any) -> None:
        policy = SlaPolicy.objects.filter(pk=options["policy"]).first()
        if policy is None:
            raise CommandError(f"No SLA policy with id {options['policy']}.")
        if options["action"] == "export":
            self.stdout.write(export_policy(policy), ending="")
            return
        if not options["file"]:
            raise CommandError("import needs the YAML file to read.")
        try:
            objectives = import_policy(policy, Path(options["file"]).read_text(encoding="utf-8"))
        except (OSError, OpenSloError) as error:
            raise CommandError(f"Nothing imported: {error}") from error
        self.stdout.write(f"Policy {policy.pk} now has {len(objectives)} objectives.")
