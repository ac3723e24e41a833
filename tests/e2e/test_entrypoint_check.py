"""An entrypoint that runs a file the context lacks (`python3 trian.py`) is refused at create,
as a config error naming the file (and the closest one there), by `dettui e create` and by
Determined's `det e create` alike; it used to be accepted and fail max_restarts + 1 times on an
agent. Entrypoints that are not surely paths in the context are created as before."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import textwrap
import urllib.error
from pathlib import Path

import pytest

from tests.conftest import Served

pytestmark = pytest.mark.slow
DET_VENV = os.environ.get("DETTUI_DET_VENV")
FILES = {"train.py": "print('train')\n", "model_def.py": "class Trial: ...\n",
         "pkg/__init__.py": "", "pkg/mod.py": "print('mod')\n"}


def context(tmp_path: Path, entrypoint: str, name: str = "exp") -> tuple[Path, Path]:
    ctx = tmp_path / "ctx"
    if not ctx.exists():
        for path, text in FILES.items():
            (ctx / path).parent.mkdir(parents=True, exist_ok=True)
            (ctx / path).write_text(text)
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(textwrap.dedent(f"""
        name: {name}
        entrypoint: {entrypoint}
        searcher: {{name: single, metric: loss, max_length: 1}}
        max_restarts: 5
        """))
    return cfg, ctx


@pytest.mark.parametrize(("entrypoint", "said"), [
    ("python3 trian.py", "entrypoint names trian.py, which is not in the context (did you mean "
                         "train.py?)"),
    ("trian.py", "entrypoint names trian.py, which is not in the context (did you mean "
                 "train.py?)"),
    ("model_dfe:Trial", "entrypoint names module model_dfe (model_dfe.py or "
                        "model_dfe/__init__.py), which is not in the context (did you mean "
                        "model_def?)"),
    ("python3 -m pkg.mdo", "entrypoint names module pkg.mdo (pkg/mdo.py or pkg/mdo/__init__.py)"
                           ", which is not in the context (did you mean pkg.mod?)"),
    ("python3 -m determined.launch.torch_distributed python3 trian.py",
     "entrypoint names trian.py, which is not in the context (did you mean train.py?)"),
])
def test_a_missing_entrypoint_file_is_refused_at_create(headless: Served, tmp_path: Path,
                                                        entrypoint: str, said: str) -> None:
    cfg, ctx = context(tmp_path, entrypoint)
    res = headless.cli("e", "create", str(cfg), str(ctx), check=False)
    assert res.returncode != 0, res.stdout + res.stderr
    out = " ".join((res.stdout + res.stderr).split())
    assert f"Invalid experiment configuration ({cfg}): - {said}" in out, out  # as others
    assert headless.api("GET", "/api/v1/experiments")["experiments"] == []


def test_the_master_refuses_it_for_any_client(headless: Served) -> None:
    """What `det e create` and other clients send: the master answers 400, a config error."""
    files = [{"path": "train.py", "type": 48, "content": base64.b64encode(b"print(1)").decode(),
              "mtime": "1700000000", "mode": 33188, "uid": 0, "gid": 0}]
    config = ("name: x\nentrypoint: python3 -m determined.launch.torch_distributed --trial "
              "model_dfe:Trial\nsearcher: {name: single, metric: loss, max_length: 1}\n")
    for validate_only in (False, True):
        with pytest.raises(urllib.error.HTTPError) as refused:
            headless.api("POST", "/api/v1/experiments", {
                "config": config, "modelDefinition": files, "validateOnly": validate_only})
        assert refused.value.code == 400
        message = json.loads(refused.value.read())["message"]
        assert message == ("invalid experiment configuration (config):\n  - entrypoint names "
                           "module model_dfe (model_dfe.py or model_dfe/__init__.py), which is "
                           "not in the context"), message
    assert headless.api("GET", "/api/v1/experiments")["experiments"] == []


def test_entrypoints_that_are_not_surely_context_paths_are_created(headless: Served,
                                                                   tmp_path: Path) -> None:
    entrypoints = ["python3 train.py", "model_def:Trial", "python3 -m pkg.mod",
                   "python3 -m http.server", "sh -c 'python3 elsewhere.py'",
                   "python3 /opt/code/train.py", "cd pkg && python3 run.py",
                   "python3 -m determined.launch.torch_distributed -- python3 ./train.py"]
    for i, entrypoint in enumerate(entrypoints):
        cfg, ctx = context(tmp_path, entrypoint, name=f"e{i}")
        res = headless.cli("e", "create", str(cfg), str(ctx), "--paused", check=False)
        assert res.returncode == 0 and f"Created experiment {i + 1}" in res.stdout, (
            entrypoint, res.stdout + res.stderr)


@pytest.mark.skipif(not DET_VENV, reason="run through `make test` (needs the determined venv)")
def test_dets_create_shows_the_same_error(headless: Served, tmp_path: Path) -> None:
    cfg, ctx = context(tmp_path, "python3 trian.py")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DET_", "DETTUI_"))}
    env.update({"HOME": str(home), "DET_MASTER": headless.url, "XDG_CONFIG_HOME": str(home),
                "DET_USER": "determined", "DET_PASS": ""})
    res = subprocess.run([str(Path(DET_VENV or "") / "bin" / "det"), "-m", headless.url, "e",
                          "create", str(cfg), str(ctx)],
                         capture_output=True, text=True, env=env, timeout=120)
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode != 0, out
    assert "entrypoint names trian.py, which is not in the context (did you mean train.py?)" \
        in out, out
