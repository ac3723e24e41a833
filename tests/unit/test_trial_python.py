"""Which Python a trial's processes run (issue 32, item 3): the Python an entrypoint names by
absolute path, and the PATH the trial gets from it, the experiment and the agent."""

from __future__ import annotations

import pytest

from dettui.launch import spec

VENV = "/opt/venv/bin/python3"


@pytest.mark.parametrize(("entrypoint", "python"), [
    (f"{VENV} -m determined.launch.torch_distributed python3 train.py", VENV),
    ("python3 -m determined.launch.torch_distributed python3 train.py", None),
    (f"cd sub && OMP_NUM_THREADS=1 exec {VENV} train.py", VENV),
    (f"echo {VENV}; /usr/bin/python3.11 train.py", "/usr/bin/python3.11"),
    (f"pip list\n{VENV} train.py", VENV),
    ("python3 train.py > /tmp/python", None),
    ("/opt/venv/bin/pythonista train.py", None),
    ("model_def:MyTrial", None),
    ('python3 "train.py', None),  # sh says what is wrong with it
    ([VENV, "train.py"], VENV),
    (["python3", "train.py"], None),
    (["bash", "-c", f"env {VENV} train.py"], VENV),
])
def test_the_python_an_entrypoint_names(entrypoint: str | list[str], python: str | None) -> None:
    assert spec.named_python(entrypoint) == python


def test_the_trial_path() -> None:
    agent = "/srv/dettui/.venv/bin:/usr/bin:/bin"
    # nothing chosen: the agent's
    assert spec.trial_path(None, None, agent) == agent
    # the experiment's PATH as it is: nothing of the agent's before it
    assert spec.trial_path("/opt/venv/bin:/usr/bin", None, agent) == "/opt/venv/bin:/usr/bin"
    # a named Python's directory first, before either
    assert spec.trial_path(None, VENV, agent) == f"/opt/venv/bin:{agent}"
    assert spec.trial_path("/usr/bin:/bin", VENV, agent) == "/opt/venv/bin:/usr/bin:/bin"
    assert spec.trial_path("/opt/venv/bin:/bin", VENV, agent) == "/opt/venv/bin:/bin"
    assert spec.trial_path("", VENV, agent) == "/opt/venv/bin"
