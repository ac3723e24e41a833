"""The runtime's shape, as issue 30 set it: each module of the cluster runtime reaches the others
only through the dispatcher (the package's __init__ composes them), and every state change the
store makes is allowed by the transition table."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from dettui.master import transitions
from dettui.models import AllocationState, ExperimentState, TrialState

CLUSTER = Path(__file__).resolve().parents[2] / "dettui" / "master" / "cluster"


def cluster_imports(source: str) -> set[str]:
    """The cluster modules `source` imports (every import: module level, lazy, type-only)."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("dettui.master.cluster."):
                out.add(node.module.rsplit(".", 1)[1])
            elif node.module == "dettui.master.cluster":
                out |= {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name.rsplit(".", 1)[1] for a in node.names
                    if a.name.startswith("dettui.master.cluster.")}
    return out


def test_the_check_sees_every_form_of_import() -> None:
    src = ("from dettui.master.cluster.agents import Agents\n"
           "def f():\n    from dettui.master.cluster import scheduling\n"
           "import dettui.master.cluster.slurm\n")
    assert cluster_imports(src) == {"agents", "scheduling", "slurm"}


def test_runtime_modules_reach_each_other_only_through_the_dispatcher() -> None:
    found = {}
    for path in sorted(CLUSTER.glob("*.py")):
        if path.name == "__init__.py":
            continue  # the composition of the parts
        allowed = {"connections"} if path.name == "dispatcher.py" else {"dispatcher"}
        found[path.stem] = cluster_imports(path.read_text()) - allowed
    assert {m for m, extra in found.items() if extra} == set(), found
    assert {"agents", "scheduling", "slurm", "dispatcher", "recovery", "preemption"} <= set(found)


KINDS = [ExperimentState, TrialState, AllocationState]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_every_pair_of_states_is_decided_by_the_table(kind: type) -> None:
    """Every (old, new) pair: allowed exactly when the table lists it (or it stays), refused by
    `require` with both states named otherwise; `sources` is the table read backwards."""
    table = transitions.table_of(next(iter(kind)))
    assert set(table) == set(kind), "every state has a row"
    for old in kind:
        for new in kind:
            expected = old is new or new in table[old]
            assert transitions.allowed(old, new) is expected
            if expected:
                transitions.require(old, new)
                assert old in transitions.sources(new)
            else:
                with pytest.raises(Exception, match="cannot become") as err:
                    transitions.require(old, new)
                assert old.value.removeprefix("STATE_") in str(err.value)
                assert old not in transitions.sources(new)


def test_what_can_never_happen_is_refused() -> None:
    E, T, A = ExperimentState, TrialState, AllocationState
    assert not transitions.allowed(A.EXITED, A.RUNNING)  # an exit is final
    assert not transitions.allowed(A.TERMINATING, A.RUNNING)  # a kill stands
    assert not transitions.allowed(E.STOPPING_KILLED, E.ACTIVE)  # a kill is not undone
    assert not transitions.allowed(E.STOPPING_KILLED, E.PAUSED)
    assert not transitions.allowed(T.STOPPING_KILLED, T.RUNNING)
    assert not transitions.allowed(E.ACTIVE, T.RUNNING)  # kinds do not mix
    assert transitions.allowed(E.COMPLETED, E.ACTIVE)  # `det e continue`
