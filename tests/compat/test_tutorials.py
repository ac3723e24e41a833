"""Code shaped like Determined's tutorials (examples/tutorials at 0.38.1) runs on dettui as on
Determined: the Trainer API tutorial (train.py + model.py + data.py, `det.pytorch.Trainer`,
`--epochs 1`), the Core API stages 0-4 (stage 4 builds its own `core.DistributedContext`),
core_api_pytorch_mnist (metrics, checkpoints, adaptive, distributed) and an old-style
PyTorchTrial (`entrypoint: model_def:MNistTrial`). The scripts and configs are in
tests/compat/tutorials/<shape>/; each config is the tutorial's own, reduced only by `--config`
overrides a user could type (fewer slots and trials, shorter searches).

Each runs twice: on a plain install (the trial's Python is dettui's, with its stand-in
`determined`) and with the real package (`environment.environment_variables: [PATH=<venv>/bin:
...]` puts determined==0.38.1 first on the trial's PATH; experiments created by its `det`).
One master and one 8-slot agent run every experiment at once (the whole file takes one
search's time); each combination then has its own test, whose failure names the tutorial, the
config, the install and the last lines of the trial's log.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.compat.conftest import real_404s
from tests.compat.test_det_cli import DET_VENV, det
from tests.conftest import Served
from tests.poll import until

# the first test waits for every experiment (the module's fixture): a no-hang bound for the lot
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("tutorials"), pytest.mark.timeout(600),
              pytest.mark.skipif(not DET_VENV, reason="run through `make test` "
                                 "(needs the determined venv)")]

TUTORIALS = Path(__file__).resolve().parent / "tutorials"
INSTALLS = ("plain", "real")
# The real package asks for the experiment's best validation before there is one; Determined's
# master answers that with 404 as well, which the package reads as "none yet".
EXPECTED_404 = r"GET /api/v1/experiments/\d+/searcher/best_searcher_validation_metric"
WAIT = 480  # no-hang bound for the whole batch of experiments
END = ("STATE_COMPLETED", "STATE_CANCELED", "STATE_ERROR")


@dataclass
class Outcome:
    """What one experiment did, read from the master once every experiment had ended."""

    exp_id: int
    state: str = ""
    created: str = ""  # the CLI's output when the create failed
    trials: list[dict[str, Any]] = field(default_factory=list)
    validations: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    training: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    logs: dict[int, str] = field(default_factory=dict)


Check = Callable[[Outcome], list[str]]


@dataclass(frozen=True)
class Case:
    """One tutorial shape with one of its configs: what Determined would show for it."""

    shape: str  # the directory under tutorials/
    config: str  # its yaml, the tutorial's own
    overrides: tuple[str, ...] = ()  # `--config KEY=VALUE`, as a user reduces it
    trials: int = 1
    validation: tuple[str, ...] = ()  # metrics every trial's validations carry
    training: tuple[str, ...] = ()  # metrics every trial's training reports carry
    checkpoints: bool = False  # every trial has a completed checkpoint
    early_stop: bool = False  # the search stopped some trials before the others' length
    # the script logs at INFO: the real package's loggers show which `determined` ran
    says_package: bool = False
    extra: tuple[Check, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.shape}/{self.config}"


def last_validation(key: str, want: Callable[[dict[str, Any], dict[str, Any]], bool],
                    what: str) -> Check:
    """A check of each trial's last validation (its metrics and the trial's hparams)."""
    def check(out: Outcome) -> list[str]:
        bad = []
        for t in out.trials:
            vals = out.validations.get(t["id"]) or [{}]
            metrics = {**vals[-1].get("metrics", {}).get("avgMetrics", {}),
                       "stepsCompleted": vals[-1].get("stepsCompleted")}
            if not want(metrics, t.get("hparams", {})):
                bad.append(f"trial {t['id']}: {what} (last validation {metrics}, "
                           f"hparams {t.get('hparams')})")
        return bad
    check.__name__ = key
    return check


def batches(n: int) -> Check:
    def check(out: Outcome) -> list[str]:
        return [f"trial {t['id']} trained {t.get('totalBatchesProcessed')} batches, not {n}"
                for t in out.trials if t.get("totalBatchesProcessed") != n]
    return check


def rank_logs(out: Outcome) -> list[str]:
    return [f"trial {t['id']}: no log line from rank 1" for t in out.trials
            if "rank=1" not in out.logs.get(t["id"], "")]


TWO_SLOTS = ("resources.slots_per_trial=2",)
# The Trainer tutorial trains 8 batches an epoch here (64 records in batches of 8).
TRAINER_SEARCH = ("searcher.max_trials=2", "searcher.max_time=8")

CASES = (
    Case("mnist_pytorch", "const.yaml", validation=("validation_loss", "accuracy"),
         training=("loss",), checkpoints=True, says_package=True, extra=(batches(8),)),
    Case("mnist_pytorch", "adaptive.yaml", TRAINER_SEARCH, trials=2,
         validation=("validation_loss", "batches"), checkpoints=True, says_package=True),
    Case("mnist_pytorch", "distributed.yaml", TWO_SLOTS, validation=("validation_loss",),
         checkpoints=True, says_package=True, extra=(batches(8), rank_logs)),
    Case("core_api", "0_start.yaml"),
    Case("core_api", "1_metrics.yaml", validation=("x",), training=("x",), says_package=True,
         extra=(last_validation("x", lambda m, h: m.get("x") == 100, "x is 100"),)),
    Case("core_api", "2_checkpoints.yaml", validation=("x",), training=("x",), checkpoints=True,
         says_package=True),
    Case("core_api", "3_hpsearch.yaml", trials=10, validation=("x", "batches"),
         checkpoints=True, early_stop=True, says_package=True),
    Case("core_api", "4_distributed.yaml", TWO_SLOTS, validation=("x",), checkpoints=True,
         says_package=True,
         extra=(last_validation("x", lambda m, h: m.get("x") == 200 * h.get("increment_by", 0),
                                "x is 100 steps x 2 workers x increment_by (allgather)"),
                rank_logs)),
    Case("core_api_pytorch_mnist", "metrics.yaml", validation=("test_loss",),
         training=("train_loss",)),
    Case("core_api_pytorch_mnist", "checkpoints.yaml", validation=("test_loss",),
         training=("train_loss",), checkpoints=True),
    Case("core_api_pytorch_mnist", "adaptive.yaml",
         ("searcher.max_trials=2", "searcher.max_time=3",
          "entrypoint=python3 model_def_adaptive.py --epochs 3"),
         trials=2, validation=("test_loss", "epochs"), checkpoints=True),
    Case("core_api_pytorch_mnist", "distributed.yaml", TWO_SLOTS, validation=("test_loss",),
         checkpoints=True,
         extra=(last_validation("steps", lambda m, h: m.get("stepsCompleted") == 3,
                                "3 epochs of 1 batch a rank (the data sharded over 2 ranks)"),
                rank_logs)),
    Case("pytorch_trial", "const.yaml", validation=("validation_loss", "accuracy"),
         training=("loss",), checkpoints=True, says_package=True, extra=(batches(16),)),
)


def case_id(case: Case, install: str) -> str:
    return f"{case.name}-{install}"


def real_overrides() -> tuple[str, ...]:
    """The one line that gives a trial the real package: its venv first on the trial's PATH."""
    return (f"environment.environment_variables=[PATH={DET_VENV}/bin:/usr/local/sbin:"
            "/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin]",)


@dataclass
class Run:
    served: Served
    outcomes: dict[str, Outcome]


def _create(served: Served, home: Path, case: Case, install: str) -> tuple[int | None, str]:
    ctx = TUTORIALS / case.shape
    flags = [a for o in case.overrides + (real_overrides() if install == "real" else ())
             for a in ("--config", o)]
    if install == "real":
        res = det(served, home, "e", "create", str(ctx / case.config), str(ctx), *flags)
    else:
        res = served.cli("e", "create", str(ctx / case.config), str(ctx), *flags, check=False)
    words = (res.stdout + res.stderr).split()
    for i, word in enumerate(words[:-1]):
        if word == "experiment" and words[i + 1].rstrip(".").isdigit():
            return int(words[i + 1].rstrip(".")), res.stdout + res.stderr
    return None, res.stdout + res.stderr


def _read(served: Served, exp_id: int) -> Outcome:
    out = Outcome(exp_id)
    out.state = served.api("GET", f"/api/v1/experiments/{exp_id}")["experiment"]["state"]
    out.trials = served.api("GET", f"/api/v1/experiments/{exp_id}/trials")["trials"]
    for t in out.trials:
        tid = t["id"]
        for group, into in (("validation", out.validations), ("training", out.training)):
            into[tid] = served.api("GET", f"/api/v1/trials/{tid}/metrics?group={group}")[
                "metrics"]
        out.logs[tid] = served.cli("t", "logs", str(tid), check=False).stdout
    out.checkpoints = served.api("GET", f"/api/v1/experiments/{exp_id}/checkpoints")[
        "checkpoints"]
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """Every tutorial shape x config x install, submitted at once to one master, waited on
    together."""
    base = tmp_path_factory.mktemp("tutorials")
    served = Served(base / "state", base / "config", extra=["--agent-slots", "8"])
    served.start()
    try:
        home = base / "home"
        home.mkdir()
        login = det(served, home, "user", "login", "determined", stdin="\n")
        assert login.returncode == 0, login.stdout + login.stderr
        combos = [(case_id(c, i), c, i) for i in INSTALLS for c in CASES]
        # the 2-slot trials first: the searches' many 1-slot trials would keep them queued
        order = sorted(range(len(combos)), key=lambda k: (
            TWO_SLOTS[0] not in combos[k][1].overrides, -combos[k][1].trials))
        with ThreadPoolExecutor(4) as pool:
            made = dict(zip(order, pool.map(
                lambda k: _create(served, home, combos[k][1], combos[k][2]), order),
                strict=True))
        created = [made[k] for k in range(len(combos))]
        ids = {exp_id for exp_id, _ in created if exp_id is not None}

        def running() -> list[int]:
            states = {e["id"]: e["state"] for e in served.api(
                "GET", "/api/v1/experiments?limit=200")["experiments"]}
            return [i for i in ids if states.get(i) not in END]

        # past the bound, the tests of the experiments still running say so, one each
        with contextlib.suppress(AssertionError):
            until(running, "every experiment to end", done=lambda left: not left,
                  timeout=WAIT, most=1)
        outcomes = {}
        for (key, _, _), (exp_id, text) in zip(combos, created, strict=True):
            outcomes[key] = _read(served, exp_id) if exp_id is not None else Outcome(
                0, "NOT CREATED", created=text)
        (base / "table.txt").write_text(table(outcomes))
        yield Run(served, outcomes)
    finally:
        served.stop()


REAL_LOGGER = re.compile(r"\[\d+\] determined\.[a-z_.]+: ")  # det.LOG_FORMAT's, the real package's


def package_problems(case: Case, out: Outcome, install: str) -> list[str]:
    """The trials ran the `determined` of their install: the real package's loggers appear in
    the logs of real-install trials that log at INFO, and in no plain-install trial's."""
    found = []
    for t in out.trials:
        real = REAL_LOGGER.search(out.logs.get(t["id"], ""))
        if install == "plain" and real:
            found.append(f"trial {t['id']} ran the real package ({real.group(0)!r} in its log)")
        elif install == "real" and case.says_package and not real:
            found.append(f"trial {t['id']} did not run the real package (no line of its "
                         "loggers in the log)")
    return found


def problems(case: Case, out: Outcome, install: str) -> list[str]:
    """What differs from what Determined shows for this experiment."""
    if out.state == "NOT CREATED":
        return [f"the experiment was not created: {out.created.strip()[-600:]}"]
    found = []
    if out.state != "STATE_COMPLETED":
        found.append(f"experiment {out.exp_id} ended {out.state}")
    found += [f"trial {t['id']} ended {t['state']}" for t in out.trials
              if t["state"] != "STATE_COMPLETED"]
    if len(out.trials) != case.trials:
        found.append(f"{len(out.trials)} trials, not {case.trials}")
    for group, names, reports in (("validation", case.validation, out.validations),
                                  ("training", case.training, out.training)):
        for t in out.trials:
            seen = {k for r in reports.get(t["id"], [])
                    for k in r.get("metrics", {}).get("avgMetrics", {})}
            if names and not set(names) <= seen:
                found.append(f"trial {t['id']}: {group} metrics {sorted(seen)}, "
                             f"missing {sorted(set(names) - seen)}")
    if case.checkpoints:
        done = {c.get("training", {}).get("trialId") for c in out.checkpoints
                if c.get("state") == "STATE_COMPLETED"}
        found += [f"trial {t['id']} has no completed checkpoint" for t in out.trials
                  if t["id"] not in done]
    if case.early_stop:
        lengths = [t.get("totalBatchesProcessed", 0) for t in out.trials]
        if not lengths or min(lengths) == max(lengths):
            found.append(f"the search stopped no trial early (batches trained: {lengths})")
    found += package_problems(case, out, install)
    if not found:  # the shape's own checks read a finished experiment
        for check in case.extra:
            found += check(out)
    return found


def table(outcomes: dict[str, Outcome]) -> str:
    """tutorial x config x install -> state, trials, checkpoints, problems (for a reader of
    the test's temp dir; the tests assert the same)."""
    rows = []
    for case in CASES:
        for install in INSTALLS:
            key = case_id(case, install)
            out = outcomes[key]
            found = problems(case, out, install)
            states = sorted({t["state"].removeprefix("STATE_") for t in out.trials})
            rows.append(f"{key:55} {out.state.removeprefix('STATE_'):10} "
                        f"trials={len(out.trials)} {','.join(states):20} "
                        f"ckpts={len(out.checkpoints):3} "
                        f"{'ok' if not found else '; '.join(found)[:300]}")
            if found:
                rows += ["    " + line for line in trial_log_tails(out, 4).splitlines()]
    return "\n".join(rows) + "\n"


def trial_log_tails(out: Outcome, lines: int = 12) -> str:
    tails = []
    for t in out.trials:
        if t["state"] != "STATE_COMPLETED" or len(out.trials) == 1:
            tail = out.logs.get(t["id"], "").strip().splitlines()[-lines:]
            tails.append(f"--- trial {t['id']} ({t['state']}), last log lines:\n"
                         + "\n".join(tail))
    return "\n".join(tails[:2])


@pytest.mark.parametrize(("case", "install"),
                         [(c, i) for i in INSTALLS for c in CASES],
                         ids=[case_id(c, i) for i in INSTALLS for c in CASES])
def test_a_tutorial_shape_runs_as_on_determined(run: Run, case: Case, install: str) -> None:
    out = run.outcomes[case_id(case, install)]
    found = problems(case, out, install)
    assert not found, (f"{case.name} {' '.join(case.overrides)} on the {install} install:\n  "
                       + "\n  ".join(found) + "\n" + trial_log_tails(out))


def test_the_tutorials_meet_no_404(run: Run) -> None:
    """The real package in the trials found every route it asked for (one master ran them
    all, so the compat 404 watch, which looks at a test's own masters, is done here)."""
    log = run.served.log_path
    assert log is not None
    seen = [s for s in real_404s(log) if not re.fullmatch(EXPECTED_404, s)]
    assert not seen, f"the master answered 404 to the real determined package: {seen}"


LOAD = """
import json, sys
from determined import pytorch

kwargs = json.loads(sys.argv[2])
trial = pytorch.load_trial_from_checkpoint_path(sys.argv[1], **kwargs)
print("loaded", type(trial).__module__, type(trial).__qualname__,
      sum(p.numel() for p in trial.model.parameters()))
"""


def _stored(served: Served, uuid: str) -> Path:
    """The checkpoint's directory in the master's shared_fs storage (what a download gives)."""
    (path,) = [p for p in served.state_dir.rglob(uuid) if p.is_dir()]
    return path


@pytest.mark.parametrize(("key", "module", "kwargs"), [
    ("mnist_pytorch/const.yaml-plain", "train", {"trial_kwargs": {"hparams": "HPARAMS"}}),
    ("pytorch_trial/const.yaml-plain", "model_def", {}),
])
def test_the_real_sdk_loads_a_dettui_checkpoint_without_its_class(
        run: Run, key: str, module: str, kwargs: dict[str, Any], tmp_path: Path) -> None:
    """A checkpoint of dettui's harness holds code/ and load_data.json as Determined's: the
    real package's `load_trial_from_checkpoint_path` imports the trial class from it (no
    trial_class=), in a directory that has none of the tutorial's files."""
    out = run.outcomes[key]
    assert out.state == "STATE_COMPLETED", key
    done = [c for c in out.checkpoints if c.get("state") == "STATE_COMPLETED"]
    assert done, f"{key}: no checkpoint"
    got = _stored(run.served, done[-1]["uuid"])
    shape = key.split("/", 1)[0]
    assert {p.name for p in (TUTORIALS / shape).iterdir()} <= {
        p.name for p in (got / "code").iterdir()}, "code/ is the experiment's context"
    if "trial_kwargs" in kwargs:
        kwargs = {"trial_kwargs": {"hparams": out.trials[0]["hparams"]}}
    load = subprocess.run([str(Path(DET_VENV or "") / "bin" / "python"), "-c", LOAD, str(got),
                           json.dumps(kwargs)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert load.returncode == 0, load.stderr[-2000:]
    assert load.stdout.startswith(f"loaded {module} MNistTrial"), load.stdout


@pytest.mark.parametrize("install", INSTALLS)
def test_trainer_metrics_are_tensorboard_events(run: Run, install: str) -> None:
    """The Trainer's reported metrics are TensorBoard events in the checkpoint storage, where
    Determined's harness puts them (<storage>/<cluster>/tensorboard/experiment/E/trial/T)."""
    out = run.outcomes[f"mnist_pytorch/const.yaml-{install}"]
    events = list(run.served.state_dir.rglob(
        f"tensorboard/experiment/{out.exp_id}/trial/*/events.out.*"))
    assert events, f"no TensorBoard events for experiment {out.exp_id} ({install})"
