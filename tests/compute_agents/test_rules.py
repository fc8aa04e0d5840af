"""L1 rules without a classifier: the policy table by (domain, package, SLA class) with subtrees, old
rules files, refusals that name the row, and the text the classifier would read. The classifier's own
stage is tested in test_classifier.py (it needs the trained bundle)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compute_agents.default_rules import DEFAULT_RULES
from compute_agents.router import Decision, Rules, RulesError, classifiable_text


def rules_with(policy: list[dict[str, Any]]) -> Rules:
    return Rules(json.dumps({**DEFAULT_RULES, "policy": policy}).encode())


def test_default_rules_decide_by_sla_class_without_a_classifier() -> None:
    rules = Rules.load(None)
    assert rules.classifier is None
    assert rules.decide("anything", "pkg", "batch") == Decision(
        None, None, ("L1", "L3", "L1"), "default", l2_confirmation=False
    )
    assert rules.decide("anything", "pkg", "gold").path == ("L1", "L2", "L3", "L1")
    assert rules.path_for("pkg", "batch") == ("L1", "L3", "L1")


def test_policy_rows_pick_path_and_subtree_first_match_wins() -> None:
    rules = rules_with(
        [
            {"package": "fin.*", "sla_class": "gold", "path": ["L1", "L3", "L1"], "subtree": "finance"},
            {"package": "fin.*", "sla_class": "*", "path": ["L1", "L2", "L3", "L1"], "subtree": "finance"},
            {"package": "*", "sla_class": "*", "path": ["L1", "L2", "L3", "L1"], "subtree": "shared"},
        ]
    )
    assert rules.decide("", "fin.*", "gold").subtree == "finance"
    assert rules.decide("", "fin.*", "gold").path == ("L1", "L3", "L1")
    assert rules.decide("", "fin.*", "silver").path == ("L1", "L2", "L3", "L1")
    assert rules.decide("", "other", "gold").subtree == "shared"


def test_old_rules_files_without_domain_or_subtree_still_load(tmp_path: Path) -> None:
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(DEFAULT_RULES))
    rules = Rules.load(path)
    assert [row.subtree for row in rules.policy] == ["default", "default"]
    assert [row.domain for row in rules.policy] == ["*", "*"]


def test_a_policy_row_sends_its_request_class_to_the_queue() -> None:
    rules = rules_with(
        [
            {"package": "*", "sla_class": "batch", "path": ["L1", "L3", "L1"], "queued": True},
            {"package": "*", "sla_class": "*", "path": ["L1", "L2", "L3", "L1"]},
        ]
    )
    assert rules.decide("long document", "pkg", "batch").queued
    assert not rules.decide("a question", "pkg", "gold").queued


def test_no_matching_row_goes_through_l2() -> None:
    rules = rules_with([{"package": "only-this", "sla_class": "*", "path": ["L1", "L3", "L1"]}])
    assert rules.decide("", "another", "gold").path == ("L1", "L2", "L3", "L1")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"package": "*", "sla_class": "*", "path": ["L1", "L9", "L1"]}, "unsupported path"),
        ({"package": "*", "sla_class": "*", "path": ["L1", "L3", "L1"], "subtree": "no spaces"}, "subtree"),
        (
            {"package": "*", "sla_class": "*", "path": ["L1", "L3", "L1"], "domain": "legal"},
            "names domain 'legal' but the rules file has no classifier",
        ),
        ({"package": "", "sla_class": "*", "path": ["L1", "L3", "L1"]}, "policy row 1"),
        ("not a row", "policy row 1 must be a JSON object"),
        (
            {"package": "*", "sla_class": "*", "path": ["L1", "L3", "L1"], "queued": "yes"},
            "policy row 1: 'queued' must be true or false",
        ),
    ],
)
def test_bad_policy_rows_are_refused_with_the_reason(row: Any, message: str) -> None:
    with pytest.raises(RulesError, match=message):
        rules_with([row])


def test_a_classifier_bundle_needs_its_directory() -> None:
    raw = json.dumps({**DEFAULT_RULES, "classifier": {"encoder": "x.onnx"}}).encode()
    with pytest.raises(RulesError, match="must be loaded from its file"):
        Rules(raw)


def test_classifiable_text_reads_user_messages_or_the_prompt() -> None:
    chat = {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ignored"},
            {"role": "user", "content": [{"type": "text", "text": "second"}, {"type": "image_url"}]},
        ]
    }
    assert classifiable_text(chat) == "first\nsecond"
    assert classifiable_text({"prompt": "a prompt"}) == "a prompt"
    assert classifiable_text({"prompt": [1, 2, "third"]}) == "third"
    assert classifiable_text({"model": "m"}) == ""
