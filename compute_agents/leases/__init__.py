"""Quota leases: how several agents serving one API key share its monthly quota without overspending.

The platform grants each agent blocks of the key's quota (``POST /v1/entitlements/leases``, under a
row lock there). ``LeasedQuotaBook`` admits a request only against tokens of a lease it holds:

- ``reserve`` takes the worst case (prompt + max_tokens) out of a held lease, under the book's lock.
  When no held lease has room, one thread per key asks the platform for a new block (the lock is not
  held across the HTTP call; the others wait for its answer, then look again).
- Ahead of that, when what the key's held leases have left falls below the low-water mark (a fraction
  of the block), the reservation that crossed it starts a background grant of the next block: one
  grant in flight per key, prefetch or not, so requests only wait for a grant when nothing is left.
- The spend of each request is charged to its lease in the spool, in the record's transaction.
- A grant request is committed to the spool before it is sent; one whose answer never arrived (a
  crash, lost answers) is asked again with the same id, and the platform answers the same lease.
- ``settle_once`` (a background loop) reports each lease's cumulative spend with a sequence number:
  a non-final report renews a lease in use; a final one returns the unused rest, for a lease that is
  idle, passed over for a newer block (a request did not fit in it), past its deadline or from a
  past month. A lease being closed takes no new reservations, so the final figure cannot grow after
  it is sent.
- Offline, the agent serves only within the leases it holds, until their deadline (the platform's
  expiry minus a margin); then requests get 503 until the platform answers again.

Keys without a quota need no lease and never call the platform.

One job per module, all sharing the book's lock (a ``threading.Condition``):

- ``held``: the leases held and the arithmetic on them (room, the lease a request fits, what is due
  for a report, deadlines). No lock of its own, no spool, no platform.
- ``client``: the signed HTTP calls to the platform (grant, settle) and their errors.
- ``grants``: asking for a block (one grant in flight per key, spool first, recovery by request id,
  a back-off after a refusal or failure).
- ``prefetch``: the background grant of the next block below the low-water mark.
- ``settler``: the reports (renewal or final) and the loop that sends them.
- ``book``: ``LeasedQuotaBook``, admission (``reserve``/``release``) over the others, and their
  lifecycle (``start``, ``stop``, ``close``).
"""

from .book import GrantCounts, LeasedQuotaBook
from .client import LeaseAnswer, LeaseClient, LeaseGone, LeaseRefused, LeaseUnavailable
from .held import HeldLease, HeldLeases

__all__ = [
    "GrantCounts",
    "HeldLease",
    "HeldLeases",
    "LeaseAnswer",
    "LeaseClient",
    "LeaseGone",
    "LeaseRefused",
    "LeaseUnavailable",
    "LeasedQuotaBook",
]
