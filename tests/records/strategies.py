"""Hypothesis strategies for v1 records and float-free JSON values."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import strategies as st

# Every code point except surrogates (which are not valid in UTF-8): includes control
# characters, DEL, U+2028/2029, private use and astral characters.
CHARS = st.characters(exclude_categories=["Cs"])
TEXT = st.text(CHARS, max_size=24)
# Identifiers (client_request_id, model_id, hop nodes) refuse control characters but tab and newline.
IDENT_CHARS = st.characters(exclude_categories=["Cs", "Cc"]) | st.sampled_from(["\t", "\n"])
SLUGS = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,63}", fullmatch=True)
I64 = st.integers(-(2**63), 2**63 - 1)

JSON_VALUES: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | I64 | TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=12,
)


@st.composite
def uuid7s(draw: st.DrawFn) -> str:
    n = draw(st.integers(0, 2**128 - 1))
    n = (n & ~(0xF << 76)) | (0x7 << 76)  # version 7
    n = (n & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    return str(uuid.UUID(int=n))


HOPS = st.lists(
    st.fixed_dictionaries(
        {
            "layer": st.sampled_from(["L1", "L2", "L3"]),
            "node": st.text(IDENT_CHARS, min_size=1, max_size=64),
            "latency_us": st.integers(0, 2**32 - 1),
        }
    ),
    min_size=1,
    max_size=6,
)


@st.composite
def records(draw: st.DrawFn) -> dict[str, Any]:
    """Arbitrary valid v1 records, about half of them with the optional ``prefix_cache_write_tokens``
    (when ``tokens_in`` leaves room for it)."""
    start = draw(st.integers(1, 2**63 - 1))
    tokens_in = draw(st.integers(0, 2**32 - 1))
    pairs = draw(
        st.dictionaries(
            st.tuples(st.integers(0, 65535), st.integers(0, 65535)), st.integers(1, 2**32 - 1), max_size=8
        )
    )
    experts = [{"layer": lay, "expert": exp, "tokens": tok} for (lay, exp), tok in sorted(pairs.items())]
    hits = draw(st.integers(0, tokens_in))
    record = {
        "v": 1,
        "record_id": draw(uuid7s()),
        "agent_id": draw(SLUGS),
        "seq": draw(st.integers(0, 2**63 - 1)),
        "tenant": draw(SLUGS),
        "contract": draw(SLUGS),
        "package": draw(SLUGS),
        "sla_class": draw(SLUGS),
        "client_request_id": draw(st.text(IDENT_CHARS, max_size=128)),
        "model_id": draw(st.text(IDENT_CHARS, min_size=1, max_size=128)),
        "weights_sha3": draw(st.binary(min_size=32, max_size=32)).hex(),
        "start_ns": start,
        "end_ns": draw(st.integers(start, 2**63 - 1)),
        "clock_drift_us": draw(st.integers(-(2**31) + 1, 2**31 - 1)),
        "tokens_in": tokens_in,
        "tokens_out": draw(st.integers(0, 2**32 - 1)),
        "hops": draw(HOPS),
        "experts": experts,
        "distinct_experts": len(experts),
        "expert_tokens": sum(e["tokens"] for e in experts),
        "prefix_cache_hit_tokens": hits,
        "expert_cache_hits": draw(st.integers(0, 2**32 - 1)),
        "expert_cache_misses": draw(st.integers(0, 2**32 - 1)),
        "status": draw(st.sampled_from(["ok", "error", "timeout", "rejected", "cancelled"])),
        "outcome": draw(st.none() | st.dictionaries(TEXT, JSON_VALUES, max_size=5)),
    }
    # The optional field, present only from 1 on, within what the hits leave of tokens_in.
    if hits < tokens_in and draw(st.booleans()):
        record["prefix_cache_write_tokens"] = draw(st.integers(1, tokens_in - hits))
    return record
