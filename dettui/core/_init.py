"""`core.init()`: the Core API's context on a cluster, a detached trial's on a master
(`_detached`), or the Dummy twin (`_context.dummy_context`) anywhere else."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dettui.core._checkpoint import CheckpointContext
from dettui.core._context import Context, _dummy
from dettui.core._distributed import DistributedContext
from dettui.core._info import get_cluster_info
from dettui.core._preempt import PreemptContext, PreemptMode
from dettui.core._searcher import SearcherContext
from dettui.core._session import Session
from dettui.core._train import (
    DummyTrainContext,
    TensorboardMode,
    TrainContext,
    tensorboard_path,
)
from dettui.storage import storage_base


def init(*, distributed: DistributedContext | None = None,
         preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
         checkpoint_storage: str | Path | None = None, detached: Any = None,
         tensorboard_mode: TensorboardMode = TensorboardMode.AUTO, **_: Any) -> Context:
    """The Core API: on a cluster, talk to the master; off it, a Dummy that logs locally, or
    with `detached=core.DetachedConfig(...)` (or a dict, or True) an unmanaged trial on a
    master (see `dettui.core._detached`). On a cluster `detached` is ignored.

    With `tensorboard_mode=AUTO` (the default, as in Determined) the chief's reported training
    and validation metrics are also written as TensorBoard events under
    `ctx.train.get_tensorboard_path()`, where the trial's Python has tensorboard."""
    info = get_cluster_info()
    if info is None and detached not in (None, False):
        from dettui.core._detached import init_detached

        return init_detached(detached, distributed=distributed,
                             checkpoint_storage=checkpoint_storage,
                             tensorboard_mode=tensorboard_mode)
    if info is None:
        return _dummy(distributed or DistributedContext(), checkpoint_storage)
    if distributed is None:
        if len(info.slot_ids) > 1 and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ValueError("a multi-slot trial needs a DistributedContext: "
                             "core.init(distributed=core.DistributedContext."
                             "from_torch_distributed())")
        distributed = DistributedContext()
    session = Session(info.master_url, task_token=info.session_token)
    base = Path(checkpoint_storage) if checkpoint_storage else storage_base(info.trial.config)
    tensorboard = tensorboard_path(base, info)
    train = (TrainContext(session, info, True, tensorboard, tensorboard_mode)
             if distributed.is_chief
             else DummyTrainContext(tensorboard, session, info))
    return Context(
        info=info, distributed=distributed, train=train,
        checkpoint=CheckpointContext(base, distributed, session, info),
        preempt=PreemptContext(session, info.allocation_id, distributed, preempt_mode),
        searcher=SearcherContext(train, info, distributed), session=session,
    )

