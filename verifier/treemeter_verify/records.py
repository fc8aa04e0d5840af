"""Reading the fields the checks need from record lines.

Fast path: a canonical record (record format v1: sorted keys, no whitespace, strings escaped) has one
fixed layout, matched by one regular expression that also pins the exact key set, the optional
``prefix_cache_write_tokens`` included (present only from 1 on, between ``prefix_cache_hit_tokens`` and
``record_id``). ``match_record`` leaves the values of that field the format refuses (0, a leading zero,
2**32 and more, more than ``tokens_in`` with the hits) to the slow path, which refuses them. Inside a
canonical string every quote is escaped, so a key pattern like ``"tokens_in":`` can never match inside
a value; the only free-form part, ``outcome``, is parsed as JSON when present. A line the expression
does not match (not canonical, not a record, or a record of format v2, which adds ``decision`` and
``executor_sig`` to the v1 members) takes the slow path: a full JSON parse, whose fields are the same
for a v2 record as for the v1 record it extends.
"""

from __future__ import annotations

import json
import re
from itertools import compress
from typing import Any

from .rating import DIMENSIONS, U32, usage_of

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
    rb',"prefix_cache_hit_tokens":(?P<cached>\d+)(?:,"prefix_cache_write_tokens":(?P<writes>[1-9]\d{0,9}))?'
    rb',"record_id":"(?P<id>[0-9a-f-]{36})","seq":(?P<seq>\d+)'
    rb',"sla_class":"[a-z0-9._-]+","start_ns":(?P<start>\d+),"status":"(?P<status>[a-z]+)"'
    rb',"tenant":"(?P<tenant>[a-z0-9._-]+)","tokens_in":(?P<tin>\d+),"tokens_out":(?P<tout>\d+),"v":1'
    rb',"weights_sha3":"[0-9a-f]{64}"\}',
    re.DOTALL,
)
_HOPS = rb'"latency_us":'
_L3_LATENCY = re.compile(rb'"latency_us":(\d+),"layer":"L3"')

# (record_id, agent_id, seq, tenant, contract, start_ns, status, usage in rating.DIMENSIONS order);
# the strings stay bytes (ASCII by the format's rules), compared with bytes.
Fields = tuple[bytes, bytes, int, bytes, bytes, int, bytes, tuple[int, ...]]
# m.groups() of a matched record, in the pattern's order (unpacked by position in check._scan).
GROUP_ORDER: tuple[str, ...] = (
    "agent",
    "contract",
    "distinct",
    "misses",
    "etokens",
    "hops",
    "outcome",
    "cached",
    "writes",  # None when the record has no prefix_cache_write_tokens
)
GROUP_ORDER += ("id", "seq", "start", "status", "tenant", "tin", "tout")
assert tuple(sorted(_RECORD.groupindex, key=_RECORD.groupindex.__getitem__)) == GROUP_ORDER
fullmatch_record = _RECORD.fullmatch  # match_record, less the rules of writes_hold


def match_record(line: bytes) -> re.Match[bytes] | None:
    """The expression's match of a canonical record line, or None (the slow path decides): also when
    its optional ``prefix_cache_write_tokens`` breaks a rule the expression cannot hold
    (`writes_hold`), which the slow path then refuses."""
    m = fullmatch_record(line)
    if m is None or m["writes"] is None:
        return m
    return m if writes_hold(m["writes"], m["cached"], m["tin"]) else None


def writes_hold(writes: bytes, cached: bytes, tokens_in: bytes) -> bool:
    """The rules on ``prefix_cache_write_tokens`` that the expression cannot hold: below 2**32, and
    with the prefix-cache hits at most ``tokens_in``."""
    written = int(writes)
    return written < U32 and int(cached) + written <= int(tokens_in)


def usage_of_columns(columns: list[tuple[bytes, ...]], billable: list[bool] | None = None) -> list[int]:
    """The summed usage (rating.DIMENSIONS order) of matched records given as the columns of their
    m.groups() (``zip(*groups)``), counting only the ``billable`` ones when given: one C-level pass per
    column instead of a dozen Python operations per record."""
    if not columns:
        return [0] * len(DIMENSIONS)
    if billable is not None:
        columns = [tuple(compress(column, billable)) for column in columns]
    _, _, distinct, misses, etok, hops, outcomes, cached, writes, _, _, _, _, _, tin, tout = columns
    every_hop = b"|".join(hops)
    verified = sum(
        1 for outcome in outcomes if outcome != b"null" and json.loads(outcome).get("verified") is True
    )
    return [
        len(tin),
        sum(map(int, tin)),
        sum(map(int, tout)),
        sum(map(int, cached)),
        sum(int(w) for w in writes if w is not None),
        sum(map(int, etok)),
        every_hop.count(_HOPS),
        sum(map(int, misses)),
        sum(map(int, _L3_LATENCY.findall(every_hop))),
        sum(map(int, distinct)),
        verified,
    ]


def fields_of(line: bytes) -> Fields | None:
    """The checked fields of one record line; None when it is not a record at all."""
    m = match_record(line)
    if m is None:
        return parse_record(line)
    groups = m.groups()
    agent, contract, *_, rid, seq, start, status, tenant, _, _ = groups
    usage = tuple(usage_of_columns([(g,) for g in groups]))
    return (rid, agent, int(seq), tenant, contract, int(start), status, usage)


def parse_record(line: bytes) -> Fields | None:
    return record_fields(load_record(line))


def load_record(line: bytes) -> Any:
    """The JSON value of a line; None when it is not JSON."""
    try:
        return json.loads(line)
    except ValueError:
        return None


def record_fields(record: Any) -> Fields | None:
    """The checked fields of a parsed line; None when it is not a record."""
    try:
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
