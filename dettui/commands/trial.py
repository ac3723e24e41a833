"""`dettui trial|t logs|describe`. Log lines are the trial's text: they reach the terminal
through `output.log_line`, control sequences escaped (dettui.terminal_text)."""

from __future__ import annotations

from dettui.client import Client
from dettui.commands import output
from dettui.errors import InvalidArgument


async def follow_logs(c: Client, trial_id: int, *, follow: bool = True,
                      ranks: list[int] | None = None, tail: int | None = None,
                      as_json: bool = False, prefix: str = "") -> None:
    """Print the trial's log lines (the last `tail`; with `follow`, until its stream ends),
    each after `prefix` (`trial 3 `, when several trials' lines are interleaved)."""
    import sys

    lines = []
    async for item in c.trial_logs(trial_id, follow=follow and not tail, ranks=ranks, tail=tail):
        if tail:
            lines.append(item)
            continue
        _emit(item, as_json, prefix)
        sys.stdout.flush()
    for item in reversed(lines):
        _emit(item, as_json, prefix)
    if tail and follow:
        last = max((int(i["id"]) for i in lines), default=0)
        async for item in c.trial_logs(trial_id, follow=True, ranks=ranks):
            if int(item["id"]) > last:
                _emit(item, as_json, prefix)


def _emit(item: dict[str, object], as_json: bool, prefix: str = "") -> None:
    import json
    import sys

    if as_json:
        sys.stdout.write(json.dumps(item) + "\n")  # JSON escapes every control character
    else:
        output.log_line(prefix + str(item["message"]))


async def logs(c: Client, trial_id: int, *, follow: bool, ranks: list[int] | None,
               tail: int | None, as_json: bool) -> None:
    t = await c.trial(trial_id)
    if ranks:
        ranks = await _ranks(c, t, ranks)
    await follow_logs(c, trial_id, follow=follow, ranks=ranks, tail=tail, as_json=as_json)
    if follow and not as_json:
        output.err_console.print(
            f"Trial log stream ended. To reopen log stream, run: dettui trial logs -f {trial_id}")


async def _ranks(c: Client, trial: dict[str, object], ranks: list[int]) -> list[int] | None:
    """The ranks to ask for. A one-slot trial's lines carry no rank: its rank 0 is all of
    them. A rank the trial does not have is an error, not an empty listing."""
    exp = await c.experiment(int(str(trial["experimentId"])))
    if exp.get("unmanaged"):
        return ranks  # a detached script's ranks are its own: not in any config
    slots = int(((exp.get("config") or {}).get("resources") or {}).get("slots_per_trial", 1))
    slots = max(slots, 1)
    wrong = sorted({r for r in ranks if not 0 <= r < slots})
    if wrong:
        have = "its only rank is 0" if slots == 1 else f"its ranks are 0 to {slots - 1}"
        raise InvalidArgument(f"trial {trial['id']} runs on {slots} slot"
                              f"{'s' if slots != 1 else ''}: {have}; rank "
                              f"{', '.join(map(str, wrong))} has no logs")
    return None if slots <= 1 else ranks


async def describe(c: Client, trial_id: int, *, as_json: bool) -> None:
    t = await c.trial(trial_id)
    if as_json:
        output.print_json(t)
        return
    output.table(f"Trial {trial_id}", ["Experiment", "State", "Steps", "Restarts",
                                       "Hyperparameters", "Latest validation"],
                 [(t["experimentId"], output.state(t["state"]), t["totalBatchesProcessed"],
                   t["restarts"], output.hparams_text(t["hparams"]),
                   output.metrics_text(t.get("latestValidation")))], record=True)
