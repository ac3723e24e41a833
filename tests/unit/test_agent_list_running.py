"""`dettui agent list` says what runs on each agent (the README promises it): each allocation's
part there as `exp E trial T (N slots)`, from the master's task list."""

from __future__ import annotations

from dettui.commands.cluster import running_on


def test_each_agent_lists_the_trials_on_it() -> None:
    tasks = [
        {"allocationId": "3.b", "experimentId": 3, "trialId": 7, "registeredTime": "2",
         "resources": [{"agentId": "a", "slots": [0, 1]}, {"agentId": "b", "slots": [0]}]},
        {"allocationId": "2.a", "experimentId": 2, "trialId": 4, "registeredTime": "1",
         "resources": [{"agentId": "a", "slots": [2]}]},
    ]
    assert running_on(tasks) == {"a": ["exp 2 trial 4 (1 slot)", "exp 3 trial 7 (2 slots)"],
                                 "b": ["exp 3 trial 7 (1 slot)"]}
    assert running_on([]) == {}
