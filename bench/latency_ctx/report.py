"""Report one training metric as soon as possible, then exit (the latency probe)."""

from dettui import core

with core.init() as ctx:
    ctx.train.report_training_metrics(steps_completed=1, metrics={"loss": 1.0})
print("reported", flush=True)
