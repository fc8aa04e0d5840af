from django.db import models

from agents.models import Agent
from ledger.models import LogBatch
from treemeter_records.limits import FIELD_PATH_MAX, RECORD_ID_LENGTH

from .rejections import REJECTED_ID_MAX


class IngestBatch(models.Model):
    """One signed batch as received, with the answer given. A replay gets this answer back."""

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="batches")
    log_batch = models.OneToOneField(
        LogBatch,
        on_delete=models.PROTECT,
        related_name="ingest_batch",
        help_text="The batch as signed, in the verifiable log (ledger.services.keep_signed_batch).",
    )
    header_digest = models.CharField(max_length=64, help_text="SHA-256 of the canonical signed header.")
    key_id = models.CharField(max_length=64)
    first_seq = models.BigIntegerField()
    last_seq = models.BigIntegerField()
    record_count = models.IntegerField()
    merkle_root = models.CharField(max_length=64)
    accepted = models.IntegerField()
    duplicate = models.IntegerField()
    rejected = models.IntegerField()
    status_code = models.PositiveSmallIntegerField()
    response = models.JSONField()
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-received_at"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "header_digest"], name="one_answer_per_batch"),
        ]

    def __str__(self) -> str:
        return f"{self.agent_id}:{self.first_seq}-{self.last_seq}"


class SequenceRange(models.Model):
    """A maximal run of sequence numbers whose records are stored, per agent (merged on every batch)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="sequence_ranges")
    first_seq = models.BigIntegerField()
    last_seq = models.BigIntegerField()

    class Meta:
        ordering = ["agent", "first_seq"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "first_seq"], name="one_range_start_per_agent"),
            models.CheckConstraint(
                condition=models.Q(last_seq__gte=models.F("first_seq")), name="range_ordered"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agent_id}:{self.first_seq}-{self.last_seq}"


class SequenceGap(models.Model):
    """Sequence numbers missing between stored ranges: records an agent produced that have not arrived."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="sequence_gaps")
    first_missing = models.BigIntegerField()
    last_missing = models.BigIntegerField()
    detected_at = models.DateTimeField(auto_now_add=True)
    closed_at = models.DateTimeField(null=True, blank=True, help_text="When the missing records arrived.")

    class Meta:
        ordering = ["agent", "first_missing"]

    def __str__(self) -> str:
        return f"{self.agent_id}: missing {self.first_missing}-{self.last_missing}"


class RejectedRecord(models.Model):
    """A record that arrived in a valid batch but was refused, with the reason code."""

    batch = models.ForeignKey(IngestBatch, on_delete=models.CASCADE, related_name="rejected_records")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="rejected_records")
    seq = models.BigIntegerField(null=True)
    record_id = models.CharField(
        max_length=REJECTED_ID_MAX,
        blank=True,
        help_text=f"As sent when it is at most {RECORD_ID_LENGTH} printable characters, else sha256:<hex>.",
    )
    code = models.CharField(max_length=64)
    field = models.CharField(max_length=FIELD_PATH_MAX, blank=True)
    message = models.TextField()

    class Meta:
        ordering = ["agent", "seq"]

    def __str__(self) -> str:
        return f"{self.agent_id}:{self.seq} {self.code}"


class PendingInsert(models.Model):
    """The outbox between the two stores: a committed batch's accepted lines, not yet in ClickHouse.

    Written in the ingest transaction, so ClickHouse only ever receives records whose answer, sequence
    ranges and log leaves have committed. `ingest.services.store_pending` inserts the lines (with
    `dedup_token`, so an insert repeated after a failure is dropped by the engine) and deletes the row.
    """

    batch = models.OneToOneField(IngestBatch, on_delete=models.CASCADE, related_name="pending_insert")
    dedup_token = models.CharField(max_length=64)
    lines = models.BinaryField(help_text="The accepted records' canonical lines, newline-separated.")
    sandbox_lines = models.BinaryField(
        default=b"", help_text="Those of customer sandboxes' contracts, kept apart (sandbox_records)."
    )
    tenants = models.JSONField(help_text="The tenants whose usage these lines change.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pk"]

    def __str__(self) -> str:
        return f"pending {self.batch_id}"
