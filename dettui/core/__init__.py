"""The Core API for training code, with Determined's names: port a script by changing
`from determined import core` to `from dettui import core`.

Runs inside users' training processes: stdlib plus lazily imported torch; never textual or
aiohttp.

Off a cluster, `core.init()` returns a Dummy context that logs locally, and
`core.init(detached=core.DetachedConfig(...))` reports to an unmanaged experiment and trial on a
master instead (detached mode; the keys are documented in `dettui.core._detached`).
"""

from dettui.core._checkpoint import CheckpointContext, merge_metadata
from dettui.core._context import (
    Context,
    ExperimentalCoreContext,
    InvalidHP,
    ProfilerContext,
)
from dettui.core._detached import DetachedConfig, DetachedContext
from dettui.core._distributed import DistributedContext, DummyDistributedContext
from dettui.core._info import (
    ClusterInfo,
    RendezvousInfo,
    ResourcesInfo,
    TrialInfo,
    get_cluster_info,
)
from dettui.core._init import init
from dettui.core._preempt import DummyPreemptContext, PreemptContext, PreemptMode
from dettui.core._searcher import SearcherContext, SearcherOperation
from dettui.core._train import (
    DummyTrainContext,
    EarlyExitReason,
    TensorboardMode,
    TrainContext,
)

__all__ = [
    "CheckpointContext", "ClusterInfo", "Context", "DetachedConfig", "DetachedContext",
    "DistributedContext", "DummyDistributedContext", "DummyPreemptContext", "DummyTrainContext",
    "EarlyExitReason",
    "ExperimentalCoreContext", "InvalidHP", "PreemptContext", "PreemptMode", "ProfilerContext",
    "RendezvousInfo", "ResourcesInfo", "SearcherContext", "SearcherOperation",
    "TensorboardMode", "TrainContext", "TrialInfo", "get_cluster_info", "init",
    "merge_metadata",
]
