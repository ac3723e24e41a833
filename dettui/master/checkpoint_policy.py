"""Checkpoint garbage collection: which checkpoints a policy deletes (pure; SEMANTICS §7).

Each checkpoint is joined to its trial's validation at the same step; value = the searcher
metric, negated when larger is better. Ranks: over the experiment by value (no value last, ties
by validation id), within the trial the same, and within the trial by steps (newest first).
Delete iff ((experiment_rank > save_experiment_best and trial_rank > save_trial_best) or no
value) and trial_order_rank > save_trial_latest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class GcPolicy:
    """How many checkpoints survive (the config's checkpoint_storage.save_*; defaults there)."""

    save_experiment_best: int
    save_trial_best: int
    save_trial_latest: int


@dataclass(frozen=True)
class CkptFacts:
    uuid: str
    trial_id: int
    steps: int
    value: float | None  # the searcher metric at the same step, sign-adjusted
    validation_id: int | None = None


def _rank(items: Sequence[CkptFacts], key: object) -> dict[str, int]:
    """SQL rank(): equal keys share a rank; the next distinct key skips ahead."""
    ordered = sorted(items, key=key)  # type: ignore[arg-type]
    ranks: dict[str, int] = {}
    prev = None
    for i, item in enumerate(ordered, start=1):
        k = key(item)  # type: ignore[operator]
        if k != prev:
            rank = i
            prev = k
        ranks[item.uuid] = rank
    return ranks


def _by_value(c: CkptFacts) -> tuple[int, float, int]:
    return (1, 0.0, 0) if c.value is None else (0, c.value, c.validation_id or 0)


def to_delete(checkpoints: Sequence[CkptFacts], policy: GcPolicy) -> list[str]:
    exp_rank = _rank(checkpoints, _by_value)
    trial_rank: dict[str, int] = {}
    order_rank: dict[str, int] = {}
    for trial_id in {c.trial_id for c in checkpoints}:
        mine = [c for c in checkpoints if c.trial_id == trial_id]
        trial_rank |= _rank(mine, _by_value)
        order_rank |= _rank(mine, lambda c: -c.steps)
    out = []
    for c in checkpoints:
        not_best = (exp_rank[c.uuid] > policy.save_experiment_best
                    and trial_rank[c.uuid] > policy.save_trial_best)
        if (not_best or c.value is None) and order_rank[c.uuid] > policy.save_trial_latest:
            out.append(c.uuid)
    return out
