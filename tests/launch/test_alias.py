"""`import determined` in a trial's Python: dettui's modules when the real package is missing,
the real package (untouched) when it is there. Run through the trial's sitecustomize, as every
process of a trial is."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dettui.launch import sitedir

DET_VENV = os.environ.get("DETTUI_DET_VENV")


def python(code: str, *args: str, extra_path: str = "", cwd: Path | None = None,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(p for p in (sitedir.DIRECTORY, extra_path) if p)
    full = {**os.environ, "PYTHONPATH": path, **(env or {})}
    return subprocess.run([sys.executable, *(["-c", code] if code else []), *args],
                          capture_output=True, text=True, env=full, timeout=120, cwd=cwd)


def test_determined_resolves_to_dettui_without_the_real_package() -> None:
    res = python("""
import determined as det
from determined import core
import determined.pytorch as dp
import dettui.core, dettui.pytorch
assert core is dettui.core and dp is dettui.pytorch, (core, dp)
assert det.InvalidHP is dettui.core.InvalidHP and det.get_cluster_info() is None
assert det.TrialContext is dettui.pytorch.PyTorchTrialContext
assert dettui.core.__spec__.name == "dettui.core"  # the alias keeps the module's own spec
import determined.pytorch.samplers, determined.launch.torch_distributed
dp2 = determined.pytorch
assert dp2.Trainer and dp2.PyTorchCallback and dp2.MetricReducer and dp2.samplers
print("ok")
""")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"


def test_python_m_runs_dettuis_launcher_under_determineds_name(tmp_path: Path) -> None:
    res = python("", "-m", "determined.launch.torch_distributed", "--dry-run", "python3",
                 "train.py", cwd=tmp_path, env={"DET_SLOT_IDS": "[0,1]"})
    assert res.returncode == 0, res.stderr
    assert "--nproc_per_node 2" in res.stdout and "dettui.launch.worker" in res.stdout


def test_a_missing_module_is_still_missing() -> None:
    res = python("import determined.nothing_here")
    assert res.returncode == 1 and "No module named 'determined.nothing_here'" in res.stderr


@pytest.mark.skipif(not DET_VENV, reason="run through `make test` (needs the determined venv)")
def test_the_real_package_wins_when_it_is_importable() -> None:
    site = next((Path(DET_VENV or "") / "lib").glob("python3*/site-packages"))
    res = python("import determined, determined.core as c; print(determined.__file__, c.__name__)",
                 extra_path=str(site))
    assert res.returncode == 0, res.stderr
    assert str(site) in res.stdout and "determined.core" in res.stdout


def test_determineds_other_core_and_pytorch_names_resolve_to_dettuis() -> None:
    res = python("""
from determined import core, pytorch
assert [m.value for m in core.TensorboardMode] == ["AUTO", "MANUAL"]
assert core.EarlyExitReason.INVALID_HP.value == "EXITED_REASON_INVALID_HP"
assert pytorch.load_trial_from_checkpoint_path and pytorch.CheckpointLoadContext
dist = core.DistributedContext()
assert dist.get_num_agents() == 1 and dist.broadcast_local(5) == 5
with core.init(tensorboard_mode=core.TensorboardMode.MANUAL) as ctx:
    ctx.profiler.on()
    assert ctx.train.set_metadata({"a": 1}) == ctx.train.get_metadata() == {"a": 1}
    assert callable(ctx.train.report_early_exit) and ctx.train.get_tensorboard_path()
    assert callable(ctx.experimental.report_task_using_checkpoint)
print("ok")
""", env={"XDG_DATA_HOME": "/nonexistent-dettui-test"})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"


README = Path(__file__).resolve().parents[2] / "README.md"
RESOLVE = """
import importlib, json, sys
from determined import core, pytorch
instances = {"determined.core.Context": core.init()}
with pytorch.init(hparams={}) as context:
    instances["determined.pytorch.PyTorchTrialContext"] = context

def resolve(name):
    head, _, attr = name.rpartition(".")
    if head in instances:  # attributes set on the instance, as some of Determined's are
        return getattr(instances[head], attr)
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            found = getattr(found, part)
        return found
    raise ImportError(name)

out = {}
for name in json.loads(sys.argv[1]):
    try:
        resolve(name)
        out[name] = True
    except (ImportError, AttributeError):
        out[name] = False
print(json.dumps(out))
"""


def readme_names(opening: str) -> list[str]:
    """The `determined.*` names of the README bullet that starts with `opening`."""
    text = README.read_text()
    bullet = text[text.index(f"\n- {opening}"):]
    bullet = bullet[:bullet.index("\n- ", 3)]
    return re.findall(r"`(determined\.[\w.]+)`", bullet)


def test_the_readme_lists_what_dettuis_determined_offers_and_lacks(tmp_path: Path) -> None:
    offered = readme_names("Offered by dettui's `determined`")
    lacking = readme_names("Not in dettui's `determined`")
    assert len(offered) >= 15 and len(lacking) >= 15, (offered, lacking)
    res = python(RESOLVE, json.dumps(offered + lacking), cwd=tmp_path,
                 env={"XDG_DATA_HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    found = json.loads(res.stdout.strip().splitlines()[-1])
    assert [n for n in offered if not found[n]] == [], "offered, yet missing"
    assert [n for n in lacking if found[n]] == [], "listed as missing, yet there"
