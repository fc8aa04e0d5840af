"""Pure pricing: the metered dimensions, the charge models (one registry of kinds), custom-metric
expressions, the charge validation contracts and catalog apply, the invoice line kinds, and the errors
billing answers with. No ORM objects and no I/O; imports only `common`, the standard library and
Django's choice types. Rating against contracts and invoices lives in billing, which imports this."""
