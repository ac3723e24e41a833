"""`searcher.max_length` warns only where it is advice that fits: a Core API script reports
its own progress, but a legacy trial class (`model_def:Trial`) is trained to max_length by
the harness, as in Determined, so `e create sample_ctx/trial.yaml` warns of nothing."""

from __future__ import annotations

import textwrap

import pytest

from dettui.config.loader import load_config
from tests.conftest import REPO

CONFIG = """
name: x
entrypoint: {entrypoint}
searcher: {{name: single, metric: loss, max_length: {{batches: 10}}}}
"""


@pytest.mark.parametrize("entrypoint", [
    "model_def:SpiralsTrial",
    "python3 -m determined.launch.torch_distributed --trial model_def:SpiralsTrial",
    "[python3, -m, dettui.launch.torch_distributed, --trial, model_def:SpiralsTrial]",
])
def test_a_trial_class_is_not_told_max_length_is_deprecated(entrypoint: str) -> None:
    cfg = load_config(textwrap.dedent(CONFIG.format(entrypoint=entrypoint)))
    assert not [w for w in cfg.warnings if "max_length" in w], cfg.warnings


@pytest.mark.parametrize("entrypoint", ["python3 train.py", "python3 train.py --trial x",
                                        "python3 -m determined.launch.torch_distributed "
                                        "python3 train.py"])
def test_a_core_api_script_is_told_to_report_progress(entrypoint: str) -> None:
    cfg = load_config(textwrap.dedent(CONFIG.format(entrypoint=entrypoint)))
    assert any("searcher.max_length is deprecated" in w for w in cfg.warnings)


def test_the_trial_class_sample_warns_of_nothing() -> None:
    cfg = load_config((REPO / "sample_ctx" / "trial.yaml").read_text())
    assert cfg.warnings == []
