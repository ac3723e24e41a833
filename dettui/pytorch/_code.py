"""The `code/` directory of a checkpoint, as Determined writes it: the trial's model definition,
so `pytorch.load_trial_from_checkpoint_path(path)` can import the trial class from the
checkpoint alone.

On a cluster it is the experiment's context as submitted (the master's `model_def`), not the
working directory the trial may have written data into; off a cluster it is the working
directory, `.detignore` applied.
"""

from __future__ import annotations

import base64
import functools
import logging
import os
import shutil
from pathlib import Path

from dettui import context as model_context
from dettui import core
from dettui.core._session import Session
from dettui.errors import DettuiError

log = logging.getLogger("dettui.pytorch")
CODE_DIR = "code"


def write_user_code(path: Path, core_context: core.Context) -> None:
    """Write `path/code`; a failure is logged (the checkpoint itself is still good)."""
    code = path / CODE_DIR
    if code.exists():
        shutil.rmtree(code)
    try:
        data = _context_targz(core_context)
        code.mkdir(mode=0o755)
        model_context.extract(data, code)
        if core_context.info is None:  # Determined's local copy leaves its .detignore out
            (code / ".detignore").unlink(missing_ok=True)
    except (DettuiError, OSError, ValueError) as exc:
        log.warning("checkpoint %s: the model code was not saved with it (%s); "
                    "load_trial_from_checkpoint_path will need trial_class=", path.name, exc)
        shutil.rmtree(code, ignore_errors=True)


def _context_targz(core_context: core.Context) -> bytes:
    """The experiment's context, read with the trial's user session (DET_USER_TOKEN: the
    allocation's token reaches only its own trial); off a cluster, the working directory."""
    info, user_token = core_context.info, os.environ.get("DET_USER_TOKEN")
    if info is not None and user_token:
        return _model_def(info.master_url, user_token, info.trial.experiment_id)
    if info is not None:
        raise ValueError("no DET_USER_TOKEN to read the experiment's model definition with")
    return model_context.to_targz(model_context.pack(Path(".")))


@functools.lru_cache(maxsize=1)
def _model_def(master_url: str, user_token: str, experiment_id: int) -> bytes:
    """Read once per process: every checkpoint of the trial holds the same code."""
    session = Session(master_url, user_token=user_token)
    answer = session.get(f"/api/v1/experiments/{experiment_id}/model_def")
    return base64.b64decode(answer["b64Tgz"])
