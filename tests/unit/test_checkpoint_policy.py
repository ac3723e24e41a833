"""Checkpoint GC: exactly the checkpoints the rule says (SEMANTICS §7)."""

from __future__ import annotations

import pytest

from dettui.master.checkpoint_policy import CkptFacts, GcPolicy, to_delete

# Trial 1: checkpoints at 100 (val 0.5), 200 (val 0.3, its best), 300 (no validation).
# Trial 2: checkpoints at 100 (val 0.2, the experiment's best), 200 (val 0.4).
CKPTS = [
    CkptFacts("1-100", 1, 100, 0.5, 1), CkptFacts("1-200", 1, 200, 0.3, 2),
    CkptFacts("1-300", 1, 300, None), CkptFacts("2-100", 2, 100, 0.2, 3),
    CkptFacts("2-200", 2, 200, 0.4, 4),
]


@pytest.mark.parametrize(("policy", "deleted"), [
    (GcPolicy(0, 1, 1), ["1-100"]),  # defaults: each trial's best and latest survive
    (GcPolicy(0, 0, 0), ["1-100", "1-200", "1-300", "2-100", "2-200"]),
    (GcPolicy(0, 0, 1), ["1-100", "1-200", "2-100"]),
    (GcPolicy(1, 0, 0), ["1-100", "1-200", "1-300", "2-200"]),  # the experiment's best stays
    (GcPolicy(0, 2, 0), ["1-300"]),  # unvalidated checkpoints go unless among the latest
    (GcPolicy(5, 5, 5), []),
])
def test_policy_table(policy: GcPolicy, deleted: list[str]) -> None:
    assert sorted(to_delete(CKPTS, policy)) == sorted(deleted)


def test_ties_on_steps_share_the_latest_rank() -> None:
    same = [CkptFacts("a", 1, 100, None), CkptFacts("b", 1, 100, None)]
    assert to_delete(same, GcPolicy(0, 0, 1)) == []
