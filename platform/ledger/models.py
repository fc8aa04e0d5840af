"""The verifiable log's state in PostgreSQL: leaves, stored node strata, compact range, checkpoints.

The ingest batch a LogBatch came in is `IngestBatch.log_batch` (ingest is above the ledger); disputes and
billing exclusions are billing's (billing.models).
"""

from __future__ import annotations

from django.db import models

from agents.models import Agent
from treemeter_records.limits import SLUG_MAX

# Perfect subtree hashes are stored on every STRATUM-th level (4, 8, 12, ...): any subtree hash then
# needs at most 2**STRATUM reads from the stratum below, and the log stores ~1/15 node row per leaf.
STRATUM = 4


class LogState(models.Model):
    """The single row holding the tree size and its compact range; locked for every append."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    size = models.BigIntegerField(default=0)
    frontier = models.BinaryField(default=b"", help_text="Perfect subtree hashes, largest first, 32 B each.")

    def __str__(self) -> str:
        return f"log of {self.size}"


class LogBatch(models.Model):
    """A received batch as the agent signed it: what lets anyone re-check its records' signature."""

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="log_batches")
    header = models.BinaryField(help_text="Canonical header bytes, as signed.")
    signature = models.BinaryField()
    body_sha256 = models.CharField(max_length=64, help_text="SHA-256 of the raw batch body as received.")
    leaf_hashes = models.BinaryField(help_text="Leaf hashes of every line of the batch, 32 B each.")
    first_seq = models.BigIntegerField()
    last_seq = models.BigIntegerField()
    seqs = models.JSONField(
        null=True, blank=True, help_text="The lines' seqs, when not every seq in the range."
    )

    class Meta:
        ordering = ["agent", "first_seq"]
        indexes = [models.Index(fields=["agent", "first_seq"])]

    def __str__(self) -> str:
        return f"{self.agent_id}:{self.first_seq}-{self.last_seq}"


class LogLeaf(models.Model):
    """One accepted record in the log, at its position ``index``: each record id and each (agent, seq)
    is logged once, so every leaf is one stored record and every stored record one leaf."""

    index = models.BigIntegerField(primary_key=True)
    leaf_hash = models.BinaryField()
    record_id = models.UUIDField(unique=True)
    tenant = models.CharField(max_length=SLUG_MAX)
    contract = models.CharField(max_length=SLUG_MAX)
    # No foreign-key constraints in the database: PostgreSQL's deferred checks cost ~5 µs a leaf at each
    # commit, and append_batch only writes the agent and batch rows of its own transaction. No index of
    # its own for the agent either: one_leaf_per_agent_seq leads with it. None for the batch: no query
    # looks leaves up by their batch (they are read by index, record id, agent and seq, or contract and
    # time), and each index costs ~1 µs a leaf at append.
    agent = models.ForeignKey(
        Agent, on_delete=models.PROTECT, related_name="log_leaves", db_constraint=False, db_index=False
    )
    seq = models.BigIntegerField()
    start_ns = models.BigIntegerField()
    batch = models.ForeignKey(
        LogBatch, on_delete=models.PROTECT, related_name="leaves", db_constraint=False, db_index=False
    )
    position = models.IntegerField(help_text="0-based line of the record in its batch.")

    class Meta:
        ordering = ["index"]
        indexes = [models.Index(fields=["tenant", "contract", "start_ns"])]
        constraints = [models.UniqueConstraint(fields=["agent", "seq"], name="one_leaf_per_agent_seq")]

    def __str__(self) -> str:
        return f"#{self.index} {self.record_id}"


class LogNode(models.Model):
    """The hash of the perfect subtree (level, index): leaves [index * 2**level, (index + 1) * 2**level)."""

    level = models.PositiveSmallIntegerField()
    index = models.BigIntegerField()
    hash = models.BinaryField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["level", "index"], name="one_node_per_position")]

    def __str__(self) -> str:
        return f"node {self.level}/{self.index}"


class Checkpoint(models.Model):
    """A signed tree head: a C2SP tlog-checkpoint in a C2SP signed note."""

    class Reason(models.TextChoices):
        SCHEDULE = "schedule", "Scheduled"
        INVOICE = "invoice", "Invoice created"
        MANUAL = "manual", "On request"

    size = models.BigIntegerField()
    root_hash = models.BinaryField()
    note = models.TextField()
    reason = models.CharField(max_length=16, choices=Reason.choices)
    invoice_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-size", "-id"]
        indexes = [models.Index(fields=["size"])]

    def __str__(self) -> str:
        return f"checkpoint {self.size}"


class LedgerEvent(models.Model):
    """An outgoing webhook event, persisted; delivery belongs to the portal."""

    class Kind(models.TextChoices):
        SEQUENCE_GAP = "ledger.sequence_gap", "Sequence gap"

    kind = models.CharField(max_length=64, choices=Kind.choices)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="ledger_events")
    payload = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.agent_id}"
