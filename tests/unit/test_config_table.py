"""Experiment configs: a table of good and bad configs with the exact messages."""

from __future__ import annotations

import textwrap

import pytest

from dettui.config import apply_overrides, load_config
from dettui.errors import ConfigError

BASE = """
name: t
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: {batches: 10}}
"""


def load(extra: str = "", base: str = BASE, **kw: object) -> object:
    return load_config(textwrap.dedent(base) + textwrap.dedent(extra), source="exp.yaml", **kw)


def problems(extra: str = "", base: str = BASE, **kw: object) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        load(extra, base, **kw)
    assert str(exc.value).startswith("invalid experiment configuration (exp.yaml):")
    return exc.value.problems


BAD = [
    ("resources: {slots_per_trial: -1}", ["resources.slots_per_trial: must be >= 0"]),
    ("resources: {priority: 0}", ["resources.priority: must be an integer from 1 to 99"]),
    ("resources: {priority: 100}", ["resources.priority: must be an integer from 1 to 99"]),
    ("resources: {priority: true}", ["resources.priority: must be an integer from 1 to 99"]),
    ("resources: {priority: 7.5}", ["resources.priority: must be an integer from 1 to 99"]),
    ("resources: {weight: 0}", ["resources.weight: must be a positive number"]),
    ("resources: {weight: false}", ["resources.weight: must be a positive number"]),
    ("resources: {weight: .inf}", ["resources.weight: must be a positive number"]),
    ("resources: {slots: 2}",
     ['resources.slots: unknown key (additionalProperties "slots" not allowed); '
      "did you mean 'slots_per_trial'?"]),
    ("max_restart: 3",
     ['max_restart: unknown key (additionalProperties "max_restart" not allowed); '
      "did you mean 'max_restarts'?"]),
    ("max_restarts: -1", ["max_restarts: must be >= 0"]),
    ("max_restarts: lots", ["max_restarts: must be an integer"]),
    ("entrypoint: 5", ["entrypoint: must be a string or a list"]),
    ("scheduling_unit: 0", ["scheduling_unit: must be >= 1"]),
    ("min_validation_period: {batches: 1, epochs: 1}",
     ["min_validation_period: must have exactly one of batches, records or epochs"]),
    ("checkpoint_storage: {type: s3, bucket: b}",
     ["checkpoint_storage.type: 's3' storage is valid in Determined, but dettui keeps "
      "checkpoints on a filesystem its agents share: use shared_fs or directory"]),
    ("checkpoint_storage: {type: shared_fs}",
     ["checkpoint_storage.host_path: is required for shared_fs storage"]),
    ("checkpoint_storage: {type: directory}",
     ["checkpoint_storage.container_path: is required for directory storage"]),
    ("checkpoint_storage: {type: shared_fs, host_path: /data, storage_path: /elsewhere}",
     ["checkpoint_storage.storage_path: must be under host_path"]),
    ("checkpoint_storage: {type: ftp}",
     ["checkpoint_storage.type: must be one of 'shared_fs', 'directory', 's3', 'gcs' or "
      "'azure'"]),
    ("hyperparameters: {a: {type: int, minval: 3, maxval: 1}}",
     ["hyperparameters.a: minval (3) must be less than maxval (1)"]),
    ("hyperparameters: {a: {type: foo}}",
     ["hyperparameters.a.type: unknown hyperparameter type 'foo' (expected const, int, "
      "double, log or categorical)"]),
    ("hyperparameters: {a: {type: categorical, vals: []}}",
     ["hyperparameters.a.vals: must be a non-empty list"]),
    ("hyperparameters: {g: {inner: {type: log, minval: 1, maxval: 2, base: 0}}}",
     ["hyperparameters.g.inner.base: must be a number > 0"]),
    ("hyperparameters: {a: {type: double, minval: 0, maxval: 1, count: 0}}",
     ["hyperparameters.a.count: must be an integer >= 1"]),
]


@pytest.mark.parametrize(("extra", "expected"), BAD, ids=[b[0] for b in BAD])
def test_bad_configs(extra: str, expected: list[str]) -> None:
    assert problems(extra) == expected


SEARCHER_BAD = [
    ("{name: adaptive, metric: x}",
     ["searcher.name: the 'adaptive' searcher has been removed and is not valid for new "
      "experiments"]),
    ("{name: sync_halving, metric: x}",
     ["searcher.name: the 'sync_halving' searcher has been removed and is not valid for new "
      "experiments"]),
    ("{name: bayes, metric: x}",
     ["searcher.name: unknown searcher 'bayes' (valid: single, random, grid, adaptive_asha, "
      "async_halving)"]),
    ("{name: singel, metric: x}",  # a typo is named with its likely meaning
     ["searcher.name: unknown searcher 'singel' (valid: single, random, grid, adaptive_asha, "
      "async_halving); did you mean 'single'?"]),
    ("{name: random, metric: x}", ["searcher.max_trials: is required by the random searcher"]),
    ("{name: adaptive_asha, metric: x, max_trials: 4}",
     ["searcher: the `adaptive_asha` searcher requires `max_time` and `time_metric` to be "
      "set"]),
    ("{name: single}", ["searcher.metric: is required"]),
    ("{name: adaptive_asha, metric: x, max_trials: 4, max_time: 10, time_metric: b, "
     "divisor: 1}", ["searcher.divisor: must be > 1"]),
]


@pytest.mark.parametrize(("searcher", "expected"), SEARCHER_BAD, ids=[s[0] for s in SEARCHER_BAD])
def test_bad_searchers(searcher: str, expected: list[str]) -> None:
    base = f"name: t\nentrypoint: python3 t.py\nsearcher: {searcher}\n"
    assert problems(base=base) == expected


def test_grid_needs_count() -> None:
    base = "name: t\nentrypoint: x\nsearcher: {name: grid, metric: m}\n"
    assert problems("hyperparameters: {a: {type: int, minval: 1, maxval: 4}}", base=base) == [
        "hyperparameters.a: grid search is in use but count was not provided"]


def test_every_problem_is_reported_at_once() -> None:
    found = problems("resources: {slots_per_trial: -1, priority: 100}\nmax_restarts: -2\n"
                     "hyperparameters: {a: {type: foo}}")
    assert len(found) == 4


def test_managed_experiments_need_an_entrypoint() -> None:
    base = "name: t\nsearcher: {name: single, metric: m}\n"
    assert problems(base=base) == ["entrypoint: managed experiments require entrypoint"]
    assert load(base=base, managed=False) is not None


def test_malformed_yaml_names_line_and_source() -> None:
    with pytest.raises(ConfigError) as exc:
        load_config("name: [unclosed\n", source="bad.yaml")
    assert "bad.yaml" in str(exc.value)
    assert exc.value.problems[0].startswith("malformed YAML: line 2")
    with pytest.raises(ConfigError, match="must be a mapping, not a list"):
        load_config("- a\n- b\n")
    with pytest.raises(ConfigError, match="empty"):
        load_config("")


def test_defaults_are_filled() -> None:
    conf = load(now=1_700_000_000).to_expconf()  # type: ignore[attr-defined]
    assert conf["max_restarts"] == 5
    assert conf["scheduling_unit"] == 100
    assert conf["min_validation_period"] == {"batches": 0}
    assert conf["resources"]["slots_per_trial"] == 1 and conf["resources"]["weight"] == 1.0
    assert conf["searcher"]["smaller_is_better"] is True
    assert conf["searcher"]["max_concurrent_trials"] == 16
    assert conf["searcher"]["max_length"] == {"batches": 10}
    assert conf["checkpoint_storage"]["save_trial_best"] == 1
    assert conf["checkpoint_storage"]["save_experiment_best"] == 0
    assert conf["reproducibility"]["experiment_seed"] == 1_700_000_000
    assert conf["optimizations"]["aggregation_frequency"] == 1
    assert conf["log_policies"][0]["name"] == "CUDA OOM"


def test_unnamed_experiments_get_a_petname() -> None:
    base = "entrypoint: x\nsearcher: {name: single, metric: m}\n"
    name = load(base=base, now=5).to_expconf()["name"]  # type: ignore[attr-defined]
    assert name.startswith("Experiment (") and name.count("-") == 2


def test_hyperparameters_normalised_with_nested_groups() -> None:
    cfg = load("hyperparameters:\n  lr: 0.1\n  layers: [1, 2]\n"
               "  opt: {name: adam, beta: {type: double, minval: 0.8, maxval: 0.99}}\n")
    assert cfg.hyperparameters == {  # type: ignore[attr-defined]
        "lr": {"type": "const", "val": 0.1},
        "layers": {"type": "const", "val": [1, 2]},
        "opt": {"name": {"type": "const", "val": "adam"},
                "beta": {"type": "double", "minval": 0.8, "maxval": 0.99}},
    }


def test_overrides() -> None:
    data = apply_overrides({"resources": {"slots_per_trial": 1}},
                           ["resources.slots_per_trial=2", "searcher.metric=acc", "labels=[a, b]"])
    assert data == {"resources": {"slots_per_trial": 2}, "searcher": {"metric": "acc"},
                    "labels": ["a", "b"]}
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        apply_overrides({}, ["oops"])
    cfg = load_config(BASE, ["max_restarts=0"])
    assert cfg.to_expconf()["max_restarts"] == 0


def test_seed_000_config_loads() -> None:
    cfg = load_config(textwrap.dedent("""
        name: unmanaged-3-torch-distributed
        entrypoint: >-
          python3 -m determined.launch.torch_distributed
          python3 3_torch_distributed.py
        resources:
          slots_per_trial: 2
        searcher:
           name: single
           metric: x
           max_length: 1
        max_restarts: 0
        """))
    conf = cfg.to_expconf()
    assert conf["resources"]["slots_per_trial"] == 2
    assert conf["searcher"]["max_length"] == 1
    assert "searcher.max_length is deprecated" in cfg.warnings[0]


def test_image_is_accepted_with_a_warning() -> None:
    cfg = load("environment: {image: determinedai/pytorch-ngc:0.38.1}")
    assert any("environment.image is accepted but not used" in w for w in cfg.warnings)


def test_a_partial_checkpoint_storage_merges_the_masters_default() -> None:
    """Determined merges the master's storage under `checkpoint_storage: {save_trial_best: 3}`;
    the storage managers of the real package then take only their type's keys."""
    cfg = load_config(BASE + "checkpoint_storage: {save_trial_best: 3}\n")
    assert cfg.checkpoint_storage_was_defaulted  # the master puts its own place there
    storage = cfg.to_expconf()["checkpoint_storage"]
    assert storage["type"] == "shared_fs" and storage["save_trial_best"] == 3
    assert set(storage) == {"type", "save_experiment_best", "save_trial_best",
                            "save_trial_latest", "host_path", "container_path",
                            "storage_path", "propagation"}
    own = load_config(BASE + "checkpoint_storage: {type: directory, container_path: /ck}\n")
    assert own.to_expconf()["checkpoint_storage"] == {
        "type": "directory", "container_path": "/ck", "save_experiment_best": 0,
        "save_trial_best": 1, "save_trial_latest": 1}
    assert not own.checkpoint_storage_was_defaulted
