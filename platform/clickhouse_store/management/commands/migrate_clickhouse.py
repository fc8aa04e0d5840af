from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from clickhouse_store.migrator import MigrationError, apply_migrations, load_migrations, migration_status


class Command(BaseCommand):
    help = "Apply pending ClickHouse migrations (clickhouse_store/clickhouse_migrations/), or --list them."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--list", action="store_true", help="list migrations and whether each is applied")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["list"]:
                for migration, applied in migration_status():
                    mark = "X" if applied else " "
                    self.stdout.write(f"[{mark}] {migration.name}  {migration.description}")
                return
            applied_now = apply_migrations()
        except MigrationError as error:
            raise CommandError(str(error)) from error
        if not applied_now:
            self.stdout.write("ClickHouse schema is up to date.")
            return
        descriptions = {migration.name: migration.description for migration in load_migrations()}
        for name in applied_now:
            self.stdout.write(self.style.SUCCESS(f"Applied {name}: {descriptions[name]}"))
