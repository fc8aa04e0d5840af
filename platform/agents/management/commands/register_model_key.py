from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from agents.services import AgentRegistrationError, register_model_key


class Command(BaseCommand):
    help = "Register a model publisher's Ed25519 public key: agents load that model's signed manifests."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("model_id")
        parser.add_argument(
            "--public-key", required=True, help="Base64 of the raw 32-byte Ed25519 public key."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            key, created = register_model_key(
                model_id=options["model_id"], public_key_b64=options["public_key"]
            )
        except AgentRegistrationError as error:
            raise CommandError(f"{error.code}: {error.message}") from None
        state = "registered" if created else "already registered"
        self.stdout.write(f"{state}: {key.model_id} key {key.key_id}")
