"""Reading the fields the checks need from record lines.

Fast path: a canonical record (record format v1: sorted keys, no whitespace, strings escaped) has one
fixed layout, matched by one regular expression that also pins the exact key set. Inside a canonical
string every quote is escaped, so a key pattern like ``"tokens_in":`` can never match inside a value;
the only free-form part, ``outcome``, is parsed as JSON when present. A line the expression does not
match (not canonical, or not a record) takes the slow path: a full JSON parse.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .rating import usage_of

_STR = rb'"[^"\\]*(?:\\.[^"\\]*)*"'
_INT = rb"-?\d+"
_RECORD = re.compile(
    rb'\{"agent_id":"(?P<agent>[a-z0-9._-]+)","client_request_id":'
    + _STR
    + rb',"clock_drift_us":'
    + _INT
    + rb',"contract":"(?P<contract>[a-z0-9._-]+)","distinct_experts":(?P<distinct>\d+),"end_ns":\d+'
    rb',"expert_cache_hits":\d+,"expert_cache_misses":(?P<misses>\d+),"expert_tokens":(?P<etokens>\d+)'
    rb',"experts":\[[^\]]*\]'
    rb',"hops":\[(?P<hops>(?:\{"latency_us":\d+,"layer":"L[123]","node":' + _STR + rb"\},?)+)\]"
    rb',"model_id":' + _STR + rb',"outcome":(?P<outcome>null|\{.*?\}),"package":"[a-z0-9._-]+"'
    rb',"prefix_cache_hit_tokens":(?P<cached>\d+),"record_id":"(?P<id>[0-9a-f-]{36})","seq":(?P<seq>\d+)'
    rb',"sla_class":"[a-z0-9._-]+","start_ns":(?P<start>\d+),"status":"(?P<status>[a-z]+)"'
    rb',"tenant":"(?P<tenant>[a-z0-9._-]+)","tokens_in":(?P<tin>\d+),"tokens_out":(?P<tout>\d+),"v":1'
    rb',"weights_sha3":"[0-9a-f]{64}"\}',
    re.DOTALL,
)
_HOP = re.compile(rb'\{"latency_us":(\d+),"layer":"(L[123])"')

# (record_id, agent_id, seq, tenant, contract, start_ns, status, usage in rating.DIMENSIONS order);
# the strings stay bytes (ASCII by the format's rules), compared with bytes.
Fields = tuple[bytes, bytes, int, bytes, bytes, int, bytes, tuple[int, ...]]
_GROUPS: tuple[str, ...] = ("id", "agent", "seq", "tenant", "contract", "start", "status", "tin", "tout")
_GROUPS += ("cached", "etokens", "misses", "distinct", "hops", "outcome")


def fields_of(line: bytes) -> Fields | None:
    """The checked fields of one record line; None when it is not a record at all."""
    m = _RECORD.fullmatch(line)
    if m is None:
        return _slow(line)
    (
        rid,
        agent,
        seq,
        tenant,
        contract,
        start,
        status,
        tin,
        tout,
        cached,
        etok,
        misses,
        distinct,
        hops,
        outcome,
    ) = m.group(*_GROUPS)
    found = _HOP.findall(hops)
    verified = outcome != b"null" and json.loads(outcome).get("verified") is True
    l3 = sum([int(latency) for latency, layer in found if layer == b"L3"])
    usage = (
        1,
        int(tin),
        int(tout),
        int(cached),
        int(etok),
        len(found),
        int(misses),
        l3,
        int(distinct),
        verified,
    )
    return (rid, agent, int(seq), tenant, contract, int(start), status, usage)


def _slow(line: bytes) -> Fields | None:
    try:
        record: Any = json.loads(line)
        return (
            str(record["record_id"]).encode(),
            str(record["agent_id"]).encode(),
            int(record["seq"]),
            str(record["tenant"]).encode(),
            str(record["contract"]).encode(),
            int(record["start_ns"]),
            str(record["status"]).encode(),
            usage_of(record),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
