"""`from determined import core` off-cluster, in any Python that has dettui installed (the
project's venv that `make run` builds, a normal install, an editable one), exactly as
`from dettui import core`; a real `determined` package, when importable, is left alone.

Each runs a real script in a subprocess from a directory outside the repo, with no trial
environment (no PYTHONPATH, no DET_* variables): the `.pth` file the package ships does it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from dettui.launch import sitedir
from tests.conftest import REPO

DET_VENV = os.environ.get("DETTUI_DET_VENV")
PTH = "dettui-determined-alias.pth"
SCRIPT = """
from determined import core

with core.init() as ctx:
    ctx.train.report_training_metrics(steps_completed=10, metrics={"loss": 0.3})
    print("reports", ctx.train.reports)
print("core is", core.__name__, core.__file__)
"""


def run_script(python: str | Path, cwd: Path,
               pythonpath: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DET_") and k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
    env["XDG_DATA_HOME"] = str(cwd / "data")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    (cwd / "train.py").write_text(SCRIPT)
    return subprocess.run([str(python), "train.py"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_projects_venv_runs_a_determined_script_off_cluster(tmp_path: Path) -> None:
    assert REPO not in tmp_path.parents
    res = run_script(sys.executable, tmp_path)
    assert res.returncode == 0, res.stderr
    assert "reports [('training', 10, {'loss': 0.3})]" in res.stdout
    assert "core is dettui.core" in res.stdout


def test_with_the_trials_sitecustomize_too(tmp_path: Path) -> None:
    """In a trial both hooks are there (the agent's sitecustomize and the installed `.pth`):
    one answer, and the harness's alias check still says the alias is in place."""
    res = run_script(sys.executable, tmp_path, pythonpath=sitedir.DIRECTORY)
    assert res.returncode == 0 and "core is dettui.core" in res.stdout, res.stderr
    check = subprocess.run([sys.executable, "-c", "from dettui.launch import harness; "
                            "print(harness.alias_determined())"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert check.stdout.strip() == "True", check.stderr


def test_a_real_determined_package_is_left_alone(tmp_path: Path) -> None:
    fake = tmp_path / "lib" / "determined"
    (fake / "core").mkdir(parents=True)
    (fake / "__init__.py").write_text("REAL = True\n")
    (fake / "core" / "__init__.py").write_text(
        "def init():\n    raise SystemExit('the real one')\n")
    res = run_script(sys.executable, tmp_path, pythonpath=str(tmp_path / "lib"))
    assert res.returncode == 1 and "the real one" in res.stderr, (res.stdout, res.stderr)
    check = subprocess.run([sys.executable, "-c", "from dettui.launch import alias; "
                            "print(alias.install())"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120, env={**os.environ,
                                                         "PYTHONPATH": str(tmp_path / "lib")})
    assert check.stdout.strip() == "False", check.stderr


@pytest.mark.skipif(not DET_VENV, reason="run through `make test` (needs the determined venv)")
def test_determined_0_38_1_is_left_alone(tmp_path: Path) -> None:
    site = next((Path(DET_VENV or "") / "lib").glob("python3*/site-packages"))
    check = tmp_path / "check"
    check.mkdir()
    (check / "train.py").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env["PYTHONPATH"] = str(site)
    res = subprocess.run([sys.executable, "-c", "import determined, determined.core as c; "
                          "print(determined.__file__, c.__name__)"],
                         cwd=check, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert str(site) in res.stdout and "determined.core" in res.stdout


def project_copy(tmp_path: Path) -> Path:
    """What an install reads, away from the working tree (builds write build/ and egg-info)."""
    copy = tmp_path / "project"
    copy.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, copy / name)
    shutil.copytree(REPO / "dettui", copy / "dettui",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def fresh_venv(path: Path, wheel: Path) -> Path:
    """A venv with dettui from `wheel`; its dependencies are this venv's, on a plain path line
    (the `.pth` files of this venv are not run there, so dettui is the wheel's only)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True,
                   timeout=120)
    python = path / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, timeout=300,
                   capture_output=True)
    ours = site_packages(Path(sys.prefix))
    (site_packages(path) / "zz-dependencies.pth").write_text(f"{ours}\n")
    return python


def wheel_root_files(wheel: Path) -> tuple[set[str], str]:
    with zipfile.ZipFile(wheel) as z:
        record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
        return {n for n in z.namelist() if "/" not in n}, z.read(record).decode()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["wheel", "editable"])
def test_an_install_of_the_package_brings_determined(tmp_path: Path, kind: str) -> None:
    project, out = project_copy(tmp_path), tmp_path / "dist"
    out.mkdir()
    build = ("from setuptools import build_meta as b; "
             f"b.build_{'editable' if kind == 'editable' else 'wheel'}({str(out)!r})")
    res = subprocess.run([sys.executable, "-c", build], cwd=project, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    wheel = next(out.glob("*.whl"))
    root, record = wheel_root_files(wheel)
    assert PTH in root and f"\n{PTH},sha256=" in f"\n{record}", (root, record)
    python = fresh_venv(tmp_path / "venv", wheel)
    workdir = tmp_path / "work"
    workdir.mkdir()
    res = run_script(python, workdir)
    assert res.returncode == 0, res.stderr
    assert "core is dettui.core" in res.stdout
    assert f"{tmp_path}/{'project' if kind == 'editable' else 'venv'}/" in res.stdout, res.stdout
    if DET_VENV:  # the real package installed beside dettui: it wins
        det_site = site_packages(Path(DET_VENV))
        (site_packages(tmp_path / "venv") / "aa-determined.pth").write_text(f"{det_site}\n")
        res = subprocess.run([str(python), "-c", "import determined.core as c; print(c.__file__)"],
                             cwd=workdir, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0 and str(det_site) in res.stdout, res.stderr
