"""Which Python a trial's processes run (issue 32, item 3): the Python an entrypoint names by
absolute path, and the PATH the trial gets from it, the experiment and the agent."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dettui.launch import sitedir, spec

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


def test_a_python_without_determined_or_dettui_says_what_to_do_in_one_line() -> None:
    """The trial's sitecustomize in a Python the experiment chose that has neither package."""
    base = getattr(sys, "_base_executable", sys.executable)
    probe = subprocess.run([base, "-c", "import dettui"], capture_output=True, cwd="/")
    if probe.returncode == 0:
        pytest.skip(f"{base} has dettui: no Python without it here")
    env = {**os.environ, "PYTHONPATH": sitedir.DIRECTORY}
    res = subprocess.run([base, "-m", "determined.launch.torch_distributed", "python3", "t.py"],
                         capture_output=True, text=True, env=env, cwd="/", timeout=60)
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and f"run `{base} -m pip install determined`" in lines[0], lines
    # a probe for another module is untouched
    res = subprocess.run([base, "-c", "import json, importlib.util as u; "
                          "print(u.find_spec('no_such_module'))"],
                         capture_output=True, text=True, env=env, cwd="/", timeout=60)
    assert res.stdout.strip() == "None", res.stderr
