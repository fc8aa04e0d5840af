from django.db import models

from accounts.models import Tenant
from accounts.validators import validate_slug_code
from contracts.models import Contract
from treemeter_records.protocol import MANIFEST_REFUSAL_REASONS


class Agent(models.Model):
    """A process of the serving tree that signs what it reports: an executor (a compute agent beside an
    inference engine, which ships records) or an L1 router (which signs the routing decisions inside its
    executors' v2 records, and ships the records of requests it refused or nobody served)."""

    class Kind(models.TextChoices):
        EXECUTOR = "executor", "Executor"
        ROUTER = "router", "L1 router"

    agent_id = models.CharField(max_length=64, unique=True, validators=[validate_slug_code])
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.EXECUTOR)
    name = models.CharField(max_length=200, blank=True)
    host_class = models.CharField(max_length=64, blank=True, help_text="Hardware class, for cost profiles.")
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["agent_id"]

    def __str__(self) -> str:
        return self.agent_id


class AgentKey(models.Model):
    """An Ed25519 public key of an agent. Revoked keys stay, so old signatures remain attributable."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="keys")
    key_id = models.CharField(max_length=64, unique=True)
    public_key = models.CharField(max_length=64, help_text="Base64 of the raw 32-byte Ed25519 public key.")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["agent", "created_at"]

    def __str__(self) -> str:
        return self.key_id


class AgentBinding(models.Model):
    """What an agent may report for: a tenant, and optionally only one of its contracts."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="bindings")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="agent_bindings")
    contract = models.ForeignKey(
        Contract,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="agent_bindings",
        help_text="Empty: every contract of the tenant.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "tenant", "contract"],
                name="unique_agent_binding",
                nulls_distinct=False,
            )
        ]

    def __str__(self) -> str:
        return f"{self.agent} → {self.tenant}/{self.contract or '*'}"


class ModelPublisherKey(models.Model):
    """A model publisher's Ed25519 public key, registered for one model id: agents load a checkpoint of
    that model only when its manifest is signed by one of the model's keys that is not revoked (they get
    them in the entitlement snapshot). Revoked keys stay, so a refusal can name them."""

    model_id = models.CharField(max_length=200)
    key_id = models.CharField(max_length=64)
    public_key = models.CharField(max_length=64, help_text="Base64 of the raw 32-byte Ed25519 public key.")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["model_id", "created_at"]
        constraints = [models.UniqueConstraint(fields=["model_id", "key_id"], name="unique_model_key")]

    def __str__(self) -> str:
        return f"{self.model_id} {self.key_id}"


class ManifestRefusal(models.Model):
    """An agent refused to load a checkpoint because its manifest's publisher signature did not pass
    (treemeter_records.protocol.MANIFEST_REFUSAL_REASONS), as the agent reported it before exiting."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="manifest_refusals")
    model_id = models.CharField(max_length=200)
    reason = models.CharField(max_length=32, choices=[(r, r) for r in MANIFEST_REFUSAL_REASONS])
    key_id = models.CharField(max_length=64, blank=True, help_text="The key the manifest names, if any.")
    manifest_sha3 = models.CharField(max_length=64, help_text="SHA3-256 of the refused manifest's bytes.")
    refused_at = models.DateTimeField(help_text="When the agent refused it (its clock).")
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-refused_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "manifest_sha3", "refused_at"], name="unique_manifest_refusal"
            )
        ]

    def __str__(self) -> str:
        return f"{self.agent} refused {self.model_id} ({self.reason})"
