from django.db import models

from accounts.models import Tenant
from accounts.validators import validate_slug_code
from contracts.models import Contract


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
