"""The outbox's lines compressed with lz4 instead of pglz: a 10k-record batch is ~14 MB of JSON lines,
which pglz takes ~10 µs a record to compress inside the ingest transaction. A server built without lz4
keeps pglz (the statement is skipped)."""

from __future__ import annotations

from django.db import migrations

LZ4 = """
DO $$ BEGIN
    ALTER TABLE ingest_pendinginsert ALTER COLUMN lines SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN NULL;
END $$;
"""
PGLZ = "ALTER TABLE ingest_pendinginsert ALTER COLUMN lines SET COMPRESSION pglz;"


class Migration(migrations.Migration):
    dependencies = [("ingest", "0005_log_batch_required")]

    operations = [migrations.RunSQL(LZ4, PGLZ)]
