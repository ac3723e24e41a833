"""`environment.environment_variables` at intake: a NUL (which no environment can hold; the
trial got the value cut short) and a nameless `=value` are refused naming the item; the
loader's and shell's variables Determined users set (LD_PRELOAD of jemalloc, LD_LIBRARY_PATH
for CUDA, BASH_ENV) are accepted: they reach only the trial (tests/e2e/test_sandbox_env.py)."""

from __future__ import annotations

import json

import pytest

from dettui.config import load_config
from dettui.errors import ConfigError

BASE = "name: n\nentrypoint: python3 t.py\nsearcher: {name: single, metric: x, max_length: 1}\n"


def _load(variables: str) -> list[str]:
    config = load_config(BASE + f"environment: {{environment_variables: {variables}}}\n")
    return list(config.environment.environment_variables)


def test_a_nul_or_a_nameless_variable_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError) as err:
        _load('["GOOD=1", "NUL=a\\0b", "=x"]')
    text = str(err.value)
    assert "environment.environment_variables" in text
    assert "'NUL=a\\x00b' holds a NUL character" in text and "'=x' has no name" in text
    assert "GOOD" not in text
    with pytest.raises(ConfigError, match="has no name"):
        _load('{cpu: ["A=1"], cuda: ["=1"]}')


def test_loader_and_shell_variables_are_accepted_for_the_trial() -> None:
    given = ["LD_PRELOAD=/usr/lib/libjemalloc.so.2", "LD_LIBRARY_PATH=/usr/local/cuda/lib64",
             "BASH_ENV=./env.sh", "EMPTY=", "PATH=bin:/usr/bin:/bin"]
    assert _load(json.dumps(given)) == given
