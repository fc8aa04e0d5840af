from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from accounts.models import Tenant
from contracts.models import Contract
from pricing.line_kinds import LineKind
from treemeter_records.limits import SLUG_MAX

ZERO = Decimal(0)


class Invoice(models.Model):
    """One contract's bill for one closed period. There is never more than one per contract and period.

    draft → grace (waiting `grace_days` for late records) → finalized (numbered, immutable, `terms` holds
    the contract and charge terms it used) → paid or void. Corrections after finalisation are credit or
    debit notes, or adjustment lines on the next invoice.
    """

    class Status(models.TextChoices):
        DRAFT = "draft", "Draft"
        GRACE = "grace", "Grace period"
        FINALIZED = "finalized", "Finalized"
        PAID = "paid", "Paid"
        VOID = "void", "Void"

    contract = models.ForeignKey(Contract, on_delete=models.PROTECT, related_name="invoices")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="invoices")
    period_start = models.DateTimeField()
    period_end = models.DateTimeField(help_text="Exclusive.")
    currency = models.CharField(max_length=3)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.DRAFT)
    record_count = models.BigIntegerField(help_text="Usage records (all outcomes) the period holds.")
    subtotal = models.DecimalField(
        max_digits=20, decimal_places=2, default=ZERO, help_text="Lines before tax."
    )
    tax = models.DecimalField(max_digits=20, decimal_places=2, default=ZERO)
    total = models.DecimalField(max_digits=20, decimal_places=2, help_text="Gross: subtotal + exclusive tax.")
    credits_applied = models.DecimalField(
        max_digits=20, decimal_places=2, default=ZERO, help_text="Prepaid credits spent at finalisation."
    )
    credit_notes = models.DecimalField(
        max_digits=20, decimal_places=2, default=ZERO, help_text="The credit notes issued on it since."
    )
    amount_due = models.DecimalField(
        max_digits=20,
        decimal_places=2,
        default=ZERO,
        help_text="What is owed: total - credits applied - credit notes, at least 0.",
    )
    issuing_entity = models.CharField(max_length=64, default="treemeter")
    # NULL until finalised, so that the unique (issuing_entity, number) allows many drafts.
    number = models.CharField(  # noqa: DJ001
        max_length=40, null=True, blank=True, help_text="Set when finalised; gapless."
    )
    terms = models.JSONField(
        default=dict, blank=True, help_text="The contract terms the invoice was rated with."
    )
    grace_until = models.DateTimeField(null=True, blank=True)
    finalized_at = models.DateTimeField(null=True, blank=True)
    paid_at = models.DateTimeField(null=True, blank=True)
    voided_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-period_start", "contract"]
        constraints = [
            models.UniqueConstraint(
                fields=["contract", "period_start", "period_end"], name="one_invoice_per_contract_period"
            ),
            models.UniqueConstraint(fields=["issuing_entity", "number"], name="invoice_number_unique"),
        ]

    def __str__(self) -> str:
        return self.number or f"{self.contract.code} {self.period_start:%Y-%m} ({self.status})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """A finalised invoice is immutable: only its status, payment/void times and what its credit notes
        leave owing may change."""
        if self.pk is not None:
            stored = Invoice.objects.filter(pk=self.pk).values_list("status", flat=True).first()
            changing = set(kwargs.get("update_fields") or ["*"])
            if stored not in (None, *OPEN_STATUSES) and not changing <= MUTABLE_WHEN_FINAL:
                raise ValueError(f"Invoice {self.number} is {stored}: it cannot be changed.")
        super().save(*args, **kwargs)

    @property
    def parties(self) -> dict[str, Any]:
        """Issuer, buyer, issue and due dates as pinned at finalisation (billing.parties); {} before."""
        return dict(self.terms.get("parties", {}))

    @property
    def payment_status(self) -> str:
        """paid, overdue (final, unpaid, past its due date), due, or the open/void status itself."""
        if self.status != Invoice.Status.FINALIZED:
            return str(self.status)
        if self.amount_due == 0:
            return "settled"
        due_on = self.parties.get("due_on")
        return "overdue" if due_on and timezone.now().date().isoformat() > due_on else "due"

    @property
    def unbilled_records(self) -> int:
        """Records of the period that no line bills: failed, rejected, or excluded (by a dispute or an SLA
        pause). The rated quantities are pinned in the terms; `requests` counts the billable ones."""
        billable = self.terms.get("quantities", {}).get("requests")
        return 0 if billable is None else self.record_count - int(Decimal(billable))

    def owe(self) -> None:
        """Set `amount_due` from the total, the credits applied and the credit notes (debit notes are
        documents of their own, charged on their own)."""
        self.amount_due = max(self.total - self.credits_applied - self.credit_notes, ZERO)


OPEN_STATUSES = (Invoice.Status.DRAFT, Invoice.Status.GRACE)
MUTABLE_WHEN_FINAL = {"status", "paid_at", "voided_at", "credit_notes", "amount_due"}


class InvoiceLine(models.Model):
    Kind = LineKind  # the one list of line kinds (pricing.line_kinds)

    invoice = models.ForeignKey(Invoice, on_delete=models.CASCADE, related_name="lines")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.USAGE)
    dimension = models.CharField(max_length=32, blank=True)
    description = models.CharField(max_length=200)
    quantity = models.DecimalField(max_digits=24, decimal_places=6)
    unit_price = models.DecimalField(max_digits=20, decimal_places=8)
    amount = models.DecimalField(max_digits=20, decimal_places=2)
    details = models.JSONField(default=dict, blank=True, help_text="Charge model, quota, bounds applied.")

    class Meta:
        ordering = ["invoice", "id"]

    def __str__(self) -> str:
        return f"{self.dimension or self.kind}: {self.quantity} × {self.unit_price} = {self.amount}"


class Issuer(models.Model):
    """The legal entity that issues invoices under an `issuing_entity` code (Contract.issuing_entity)."""

    code = models.CharField(max_length=64, unique=True)
    legal_name = models.CharField(max_length=200)
    address = models.TextField(max_length=500, blank=True)
    tax_id = models.CharField(max_length=64, blank=True, help_text="Taxpayer identification number.")
    requires_buyer_details = models.BooleanField(
        default=False,
        help_text="Its invoices show the buyer's name, tax ID, address and bank.",
    )

    class Meta:
        ordering = ["code"]

    def __str__(self) -> str:
        return f"{self.code}: {self.legal_name}"


class InvoiceSequence(models.Model):
    """The last number issued per issuing entity; locked while numbering, so numbers have no gaps."""

    issuing_entity = models.CharField(max_length=64, unique=True)
    last_number = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.issuing_entity}: {self.last_number}"


class Coupon(models.Model):
    """A discount on a contract: a share or a fixed amount off, for `periods` invoices (None: forever)."""

    contract = models.ForeignKey(Contract, on_delete=models.CASCADE, related_name="coupons")
    code = models.CharField(max_length=64)
    percent_off = models.DecimalField(max_digits=6, decimal_places=4, null=True, blank=True)
    amount_off = models.DecimalField(max_digits=20, decimal_places=2, null=True, blank=True)
    periods = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["contract", "id"]
        constraints = [
            models.UniqueConstraint(fields=["contract", "code"], name="one_coupon_code_per_contract"),
            models.CheckConstraint(
                condition=models.Q(percent_off__isnull=True) ^ models.Q(amount_off__isnull=True),
                name="coupon_percent_xor_amount",
            ),
        ]

    def __str__(self) -> str:
        return self.code


class CreditEntry(models.Model):
    """The prepaid credits wallet: an append-only ledger per contract. Grants are positive, consumption
    by a finalised invoice negative; the balance is the sum. Rows are never updated or deleted."""

    class Kind(models.TextChoices):
        GRANT = "grant", "Grant (prepaid or goodwill)"
        CONSUME = "consume", "Paid an invoice"

    contract = models.ForeignKey(Contract, on_delete=models.PROTECT, related_name="credit_entries")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    amount = models.DecimalField(max_digits=20, decimal_places=2)
    invoice = models.ForeignKey(
        Invoice, null=True, blank=True, on_delete=models.PROTECT, related_name="credits"
    )
    reference = models.CharField(max_length=100, help_text="Idempotency key: one entry per reference.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["contract", "id"]
        verbose_name_plural = "credit entries"
        constraints = [
            models.UniqueConstraint(fields=["contract", "reference"], name="one_credit_entry_per_reference"),
        ]

    def __str__(self) -> str:
        return f"{self.contract_id} {self.kind} {self.amount} ({self.reference})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise ValueError("Credit entries are append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise ValueError("Credit entries are append-only.")


class Note(models.Model):
    """A credit note (lowers what the customer owes) or debit note (raises it) on a finalised invoice."""

    class Kind(models.TextChoices):
        CREDIT = "credit", "Credit note"
        DEBIT = "debit", "Debit note"

    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="notes")
    line = models.ForeignKey(
        InvoiceLine, null=True, blank=True, on_delete=models.PROTECT, related_name="notes"
    )
    kind = models.CharField(max_length=8, choices=Kind.choices)
    number = models.CharField(max_length=40)
    reason = models.CharField(max_length=200)
    amount = models.DecimalField(
        max_digits=20, decimal_places=2, help_text="Positive; the kind gives the sign."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["invoice", "id"]
        constraints = [models.UniqueConstraint(fields=["invoice", "number"], name="note_number_unique")]

    def __str__(self) -> str:
        return f"{self.number}: {self.kind} {self.amount}"


class LateUsage(models.Model):
    """Usage that arrived after its period's invoice was finalised, and what became of it: billed as an
    adjustment line on a later invoice, or ignored under the contract's late-usage policy. Never silent."""

    class Decision(models.TextChoices):
        ADJUSTED = "adjusted", "Billed as an adjustment line"
        IGNORED = "ignored", "Ignored (older than the contract's late_usage_days)"

    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="late_usage")
    dimension = models.CharField(max_length=32)
    quantity = models.DecimalField(max_digits=24, decimal_places=6)
    amount = models.DecimalField(max_digits=20, decimal_places=2)
    decision = models.CharField(max_length=8, choices=Decision.choices)
    billed_on = models.ForeignKey(
        Invoice, null=True, blank=True, on_delete=models.SET_NULL, related_name="late_usage_billed"
    )
    detected_at = models.DateTimeField()

    class Meta:
        ordering = ["invoice", "dimension", "id"]
        constraints = [
            models.UniqueConstraint(fields=["invoice", "dimension"], name="one_late_usage_per_line")
        ]

    def __str__(self) -> str:
        return f"{self.invoice_id} {self.dimension} +{self.quantity} {self.decision}"


class StripeCustomer(models.Model):
    """The Stripe customer a tenant's invoices are pushed to."""

    tenant = models.OneToOneField(Tenant, on_delete=models.PROTECT, related_name="stripe_customer")
    customer_id = models.CharField(max_length=64, unique=True)
    synced_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.tenant_id} → {self.customer_id}"


class StripePayment(models.Model):
    """A finalised invoice pushed to Stripe as a PaymentIntent for its amount due, with every attempt's
    outcome kept visible: `attempts`, `last_error`, and the status webhooks report. When the customer
    pays with the portal's Pay action (billing.checkout), `payment_intent_id` becomes the Checkout
    Session's PaymentIntent, so later credit notes refund what was actually received."""

    class Status(models.TextChoices):
        PENDING = "pending", "Not pushed yet"
        PUSHED = "pushed", "PaymentIntent created"
        SUCCEEDED = "succeeded", "Paid"
        FAILED = "failed", "Payment failed"
        ERROR = "error", "Push failed after all retries"
        CANCELED = "canceled", "Nothing left to charge: credited in full"

    invoice = models.OneToOneField(Invoice, on_delete=models.PROTECT, related_name="stripe_payment")
    payment_intent_id = models.CharField(max_length=64, blank=True)
    amount = models.DecimalField(
        max_digits=20,
        decimal_places=2,
        default=ZERO,
        help_text="The PaymentIntent's amount: the amount due less credit notes.",
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    checkout_session_id = models.CharField(
        max_length=80, blank=True, help_text="The Checkout Session the customer opened with Pay, if any."
    )
    superseded_intent_id = models.CharField(
        max_length=64,
        blank=True,
        help_text="The PaymentIntent pushed before the customer paid through Checkout: canceled, and "
        "refunded in full should it be paid anyway.",
    )
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.invoice_id} {self.status} {self.payment_intent_id}"


class StripeNote(models.Model):
    """A credit or debit note sent to Stripe. A credit note: a Refund when its invoice's PaymentIntent was
    paid, otherwise the PaymentIntent lowered to what is still due (canceled when nothing is); an invoice
    without a PaymentIntent gets nothing, since its push later charges the amount due less its credit
    notes. A debit note: a PaymentIntent of its own for its amount, whatever its invoice's state."""

    class Action(models.TextChoices):
        REFUND = "refund", "Refund of the paid PaymentIntent"
        REDUCE = "reduce", "PaymentIntent amount lowered"
        CANCEL = "cancel", "PaymentIntent canceled (credited in full)"
        CHARGE = "charge", "PaymentIntent of its own (debit note)"

    class Status(models.TextChoices):
        PENDING = "pending", "Not pushed yet"
        PUSHED = "pushed", "Sent to Stripe"
        SKIPPED = "skipped", "Nothing to send: the invoice has no open or paid PaymentIntent"
        PAID = "paid", "Debit note paid"
        FAILED = "failed", "Failed (see last error)"

    note = models.OneToOneField(Note, on_delete=models.PROTECT, related_name="stripe_note")
    action = models.CharField(max_length=8, choices=Action.choices, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    amount = models.DecimalField(
        max_digits=20,
        decimal_places=2,
        null=True,
        blank=True,
        help_text="The amount refunded or charged, or the PaymentIntent's amount after the change.",
    )
    stripe_id = models.CharField(max_length=64, blank=True, help_text="The Refund (re_…) or PaymentIntent.")
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.note_id} {self.action or '-'} {self.status} {self.stripe_id}"


class StripeEvent(models.Model):
    """Webhook events already handled: a redelivered event id is acknowledged and ignored."""

    event_id = models.CharField(max_length=64, unique=True)
    event_type = models.CharField(max_length=64)
    received_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.event_id


class Outcome(models.Model):
    """A declared outcome ("matched patient", value 2,000): pending for the contract's verification
    window, then confirmed or revoked (by the customer, by the contract's rule, or when the window
    closes). Only confirmed outcomes are billed; one revoked after billing gets a credit note."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending verification"
        CONFIRMED = "confirmed", "Confirmed"
        REVOKED = "revoked", "Revoked"

    class Decider(models.TextChoices):
        CUSTOMER = "customer", "The customer, through the API"
        RULE = "rule", "The contract's verification rule"
        EXPIRY = "expiry", "The verification window closed"

    contract = models.ForeignKey(Contract, on_delete=models.PROTECT, related_name="outcomes")
    ref = models.CharField(max_length=128, help_text="The customer's reference; one outcome per ref.")
    kind = models.CharField(max_length=64)
    value = models.DecimalField(max_digits=20, decimal_places=6, default=ZERO)
    record_id = models.UUIDField(null=True, blank=True, help_text="The usage record that declared it.")
    declared_at = models.DateTimeField()
    window_ends_at = models.DateTimeField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    decided_by = models.CharField(max_length=16, choices=Decider.choices, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    reason = models.CharField(max_length=200, blank=True)
    billed_on = models.ForeignKey(
        InvoiceLine, null=True, blank=True, on_delete=models.PROTECT, related_name="outcomes"
    )
    credit_note = models.ForeignKey(
        Note, null=True, blank=True, on_delete=models.PROTECT, related_name="outcomes"
    )

    class Meta:
        ordering = ["contract", "declared_at", "id"]
        constraints = [models.UniqueConstraint(fields=["contract", "ref"], name="one_outcome_per_ref")]

    def __str__(self) -> str:
        return f"{self.ref} {self.status}"


class Dispute(models.Model):
    """A customer's dispute of one invoice line, with the evidence attached when it was opened.

    Its whole history (who did what and when) is in DisputeEvent; the invoice itself is never edited:
    an accepted dispute becomes a billing credit note.
    """

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        REJECTED = "rejected", "Rejected"
        ACCEPTED = "accepted", "Accepted"
        EXCLUDED = "excluded", "Records excluded (customer dependency)"

    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="disputes")
    line = models.ForeignKey(InvoiceLine, on_delete=models.PROTECT, related_name="disputes")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="disputes")
    reason = models.TextField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    evidence = models.JSONField()
    credited = models.DecimalField(max_digits=20, decimal_places=2, default=0)
    credit_note = models.ForeignKey(
        Note, null=True, blank=True, on_delete=models.PROTECT, related_name="disputes"
    )
    opened_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "ledger_dispute"  # the table it had in the ledger app
        ordering = ["-opened_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["line"], condition=models.Q(status="open"), name="one_open_dispute_per_line"
            )
        ]

    def __str__(self) -> str:
        return f"dispute {self.pk} on line {self.line_id}: {self.status}"


SETTLED_DISPUTES = (Dispute.Status.ACCEPTED, Dispute.Status.EXCLUDED)
"""Dispute statuses that settle their line: it is not disputed again (a rejected one leaves it open)."""


class DisputeEvent(models.Model):
    """One step in a dispute's history."""

    dispute = models.ForeignKey(Dispute, on_delete=models.CASCADE, related_name="events")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    action = models.CharField(max_length=32)
    detail = models.JSONField(default=dict)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "ledger_disputeevent"
        ordering = ["dispute", "id"]

    def __str__(self) -> str:
        return f"{self.dispute_id} {self.action}"


class BillingExclusion(models.Model):
    """A record excluded from billing because a dispute found the customer's own dependency at fault
    (e.g. its system answered 503). A record is excluded at most once; the amount it was billed is
    credited by the dispute's credit notes, the invoice itself is never edited."""

    dispute = models.ForeignKey(Dispute, on_delete=models.PROTECT, related_name="exclusions")
    record_id = models.UUIDField(unique=True)
    tenant = models.CharField(max_length=SLUG_MAX)
    contract = models.CharField(max_length=SLUG_MAX)
    start_ns = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "ledger_billingexclusion"
        indexes = [
            models.Index(fields=["tenant", "contract", "start_ns"], name="ledger_bill_tenant_19b7d0_idx")
        ]

    def __str__(self) -> str:
        return f"{self.record_id} excluded by dispute {self.dispute_id}"
