"""`dettui experiment|e create|list|describe|pause|activate|cancel|kill|archive|unarchive|
delete|set`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dettui import byte_size, metric
from dettui.client import Client, GcPolicy
from dettui.commands import output
from dettui.commands.trial import follow_logs
from dettui.errors import ConfigError, DettuiError

if TYPE_CHECKING:
    from rich.progress import Progress


def _read_config(path: Path, overrides: list[str]) -> str:
    return _load(path, overrides)[0]


def _load(path: Path, overrides: list[str]) -> tuple[str, Any]:
    # The config schema (pydantic) and YAML are imported by the commands that read a config:
    # `dettui e list` does without their 0.07 s.
    import yaml

    from dettui.config import apply_overrides, load_config, yamlsafe

    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError([f"cannot read {path}: {exc.strerror}"], source=str(path)) from exc
    if overrides:
        try:
            data = yamlsafe.load(text)
        except (yaml.YAMLError, yamlsafe.YamlTooBig):
            data = None  # load_config reports it
        if isinstance(data, dict):
            text = yaml.safe_dump(apply_overrides(data, overrides), sort_keys=False)
    cfg = load_config(text, source=str(path), managed=True)
    for warning in getattr(cfg, "warnings", []):
        output.warn(str(warning))
    return text, cfg


def _pack(ctx_dir: Path, includes: list[Path]) -> list[dict[str, Any]]:
    from dettui import context

    with _progress() as bar:
        task = bar.add_task("Packing context", total=None)

        def step(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return context.pack(ctx_dir, includes, progress=step)


def _check_entrypoint(cfg: Any, files: list[dict[str, Any]], config: Path) -> None:
    """An entrypoint file the context lacks, as a config error before the upload (the master
    refuses it too, for `det e create`)."""
    from dettui import context
    from dettui.launch import entrypoint_files

    why = entrypoint_files.missing(getattr(cfg, "entrypoint", None),
                                   ((f["path"], f["type"] == context.DIRECTORY) for f in files))
    if why is not None:
        raise ConfigError([why], source=str(config))


def _progress() -> Progress:
    """A transient bar on stderr. Its own console wraps as the terminal does (the messages'
    console does not), so that the bar, once done, is erased whole: a line wider than the
    terminal left a blank line behind. Not drawn where stderr is no terminal (a pipe, a log
    file), which it would leave a blank line in."""
    import sys

    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(bar_width=20), DownloadColumn(),
                    TransferSpeedColumn(), transient=True, disable=not sys.stderr.isatty(),
                    console=Console(stderr=True, highlight=False, markup=False))


async def create(c: Client, config: Path, ctx_dir: Path, *, includes: list[Path],
                 overrides: list[str], follow: bool, paused: bool, as_json: bool,
                 dry_run: bool = False) -> int:
    text, cfg = _load(config, overrides)
    files = await asyncio.to_thread(_pack, ctx_dir, includes)
    _check_entrypoint(cfg, files, config)
    if dry_run:
        return await _dry_run(c, cfg, files)
    with _progress() as bar:
        task = bar.add_task("Uploading context", total=None)

        def step(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        body = await c.create_experiment(text, files, activate=not paused, progress=step)
    exp = body["experiment"]
    if as_json:
        output.print_json(body)
    else:
        output.console.print(f"Created experiment {exp['id']}")
    if not follow:
        return 0
    return await follow_experiment(c, int(exp["id"]))


async def _dry_run(c: Client, cfg: Any, files: list[dict[str, Any]]) -> int:
    """Validate and pack as for real, then print what each node would run."""
    from dettui import context
    from dettui.config.hyperparameters import sample_single
    from dettui.launch import dryrun
    from dettui.launch.spec import LaunchArgsError

    conf = cfg.to_expconf()
    pool = (conf.get("resources") or {}).get("resource_pool") or "default"
    try:
        agents = [dryrun.AgentView(a["id"], len(a.get("slots") or {}),
                                   (a.get("addresses") or ["127.0.0.1"])[0])
                  for a in await c.agents()
                  if a.get("enabled", True) and pool in (a.get("resourcePools") or [pool])]
    except DettuiError as exc:
        output.warn(f"no agent list ({exc}); planning alone")
        agents = []
    seed = int((conf.get("reproducibility") or {}).get("experiment_seed") or 0)
    try:
        nodes, note = dryrun.plan(conf, agents, sample_single(cfg.hyperparameters, seed),
                                  [str(f["path"]) for f in files])
    except LaunchArgsError as exc:
        raise DettuiError(f"entrypoint: {exc}") from exc
    size = context.size_of(files)
    output.console.print(f"dry run: config valid, context {len(files)} files "
                         f"({size / 1e6:.2f} MB); nothing was created", markup=False)
    output.console.print(dryrun.render(nodes, note), markup=False, highlight=False,
                         soft_wrap=True)
    return 0


ENDED = ("STATE_COMPLETED", "STATE_CANCELED", "STATE_ERROR")
WAITING = ("STATE_QUEUED", "STATE_PAUSED")
MAX_FOLLOWED = 16  # trials whose logs are streamed at once (the others wait their turn)


async def follow_experiment(c: Client, exp_id: int) -> int:
    """Stream every trial's logs until the experiment ends (each line after its trial's id,
    unless the search is `single`), then its end and its warnings; 1 if it ended in ERROR.
    Ctrl-C stops following, not the experiment."""
    try:
        exp = await _follow_trials(c, exp_id)
    except asyncio.CancelledError:
        output.err_console.print(f"stopped following; experiment {exp_id} keeps running "
                                 f"(dettui e kill {exp_id} stops it)")
        raise
    state = output.state(exp["state"])
    output.console.print(f"Experiment {exp_id} ended: {state}")
    _show_warnings(exp)
    return 1 if state == "ERROR" else 0


async def _follow_trials(c: Client, exp_id: int) -> dict[str, Any]:
    """Follow the logs of each trial once it has started (at most MAX_FOLLOWED at once), until
    the experiment and every stream have ended; the experiment."""
    exp = await c.experiment(exp_id)
    single = ((exp.get("config") or {}).get("searcher") or {}).get("name") == "single"
    seen: set[int] = set()
    slots = asyncio.Semaphore(MAX_FOLLOWED)
    streams: list[asyncio.Task[None]] = []

    async def stream(trial_id: int) -> None:
        async with slots:
            await follow_logs(c, trial_id, prefix="" if single else f"trial {trial_id} ")

    try:
        while True:
            ended = exp["state"] in ENDED
            for t in sorted(await c.trials(exp_id), key=lambda t: int(t["id"])):
                if int(t["id"]) not in seen and (ended or t["state"] not in WAITING):
                    seen.add(int(t["id"]))
                    streams.append(asyncio.create_task(stream(int(t["id"]))))
            if ended:
                break
            await asyncio.sleep(0.5)
            exp = await c.experiment(exp_id)
        await asyncio.gather(*streams)
    finally:
        for task in streams:
            task.cancel()
    return exp


async def list_(c: Client, *, show_all: bool, as_json: bool) -> None:
    exps = await c.experiments(archived=None if show_all else False, config=as_json)
    if as_json:
        output.print_json(exps)
        return
    rows = [(e["id"], e["username"], e["name"], _marker(e) + output.state(e["state"]),
             _progress_text(e.get("progress")),
             e["numTrials"], _held(e), output.when(e["startTime"]),
             output.when(e.get("endTime")), e.get("resourcePool", "")) for e in exps]
    output.table(None, ["ID", "Owner", "Name", "State", "Progress", "Trials", "Checkpoints",
                        "Start Time", "End Time", "Resource Pool"], rows,
                 least_needed=["Resource Pool", "End Time", "Start Time", "Owner"])
    warned = [str(e["id"]) for e in exps if _marker(e)]
    if warned:
        output.console.print(f"! the experiment has warnings: dettui e describe {warned[0]}"
                             + (f" (also {', '.join(warned[1:4])}"
                                f"{', …' if len(warned) > 4 else ''})" if warned[1:] else ""))


def _progress_text(progress: object) -> str:
    """"40%": an experiment's progress as its master keeps it (an ended one's too: ERROR and
    CANCELED keep what they had reached, COMPLETED is 100%), the same in every view."""
    if not isinstance(progress, int | float) or isinstance(progress, bool):
        return ""
    return f"{progress * 100:.0f}%"


async def describe(c: Client, exp_id: int, *, as_json: bool) -> None:
    exp, trials, ckpts = await asyncio.gather(c.experiment(exp_id), c.trials(exp_id),
                                              c.checkpoints(exp_id))
    if as_json:
        output.print_json({"experiment": exp, "trials": trials, "checkpoints": ckpts})
        return
    searcher = (exp.get("config") or {}).get("searcher", {})
    name = str(searcher.get("metric", ""))
    smaller = bool(searcher.get("smaller_is_better", metric.SMALLER_IS_BETTER))
    trials = sorted(trials, key=lambda t: _rank(t, name, smaller))
    best = _best_value(trials[0], name) if trials else None
    output.table(f"Experiment {exp_id}", ["ID", "Name", "State", "Progress", "Owner",
                                           "Searcher", "Metric", "Best", "Trials",
                                           "Checkpoints", "Start Time", "End Time",
                                           "Resource Pool"],
                 [(exp["id"], exp["name"], output.state(exp["state"]),
                   _progress_text(exp.get("progress")), exp["username"],
                   exp["searcherType"], name, "" if best is None else f"{best:.6g}",
                   len(trials), _held(exp), output.when(exp["startTime"]),
                   output.when(exp.get("endTime")), exp.get("resourcePool", ""))],
                 record=True)
    _show_warnings(exp)
    hp_heads, hp_cells = output.hparam_columns([t["hparams"] for t in trials])
    output.table("Trials (best first)", ["Trial ID", "State", f"Best {name}".strip(),
                                         "Steps", *hp_heads, "Restarts",
                                         "Latest training", "Latest validation",
                                         "Best validation"],
                 [(t["id"], output.state(t["state"]),
                   "" if _best_value(t, name) is None else f"{_best_value(t, name):.6g}",
                   t["totalBatchesProcessed"], *hp, t["restarts"],
                   output.metrics_text(t.get("latestTraining")),
                   output.metrics_text(t.get("latestValidation")),
                   output.metrics_text(t.get("bestValidation")))
                  for t, hp in zip(trials, hp_cells, strict=True)],
                 least_needed=["Latest training", "Best validation", "Restarts",
                               "Latest validation"])
    output.table("Checkpoints", ["Trial ID", "UUID", "Steps", "Report Time", "State",
                                 "Size", name or "Metric"],
                 [(ck["training"]["trialId"], ck["uuid"], ck["metadata"].get("steps_completed"),
                   output.when(ck["reportTime"]), output.state(ck["state"]), _size(ck),
                   output.number(ck["training"].get("searcherMetric"))) for ck in ckpts],
                 least_needed=["Report Time", "Size", "State"])


def _marker(exp: dict[str, Any]) -> str:
    """`! ` before the state of an experiment with warnings (`e describe` says which): in
    front, so that a narrow table's ellipsis does not cut it off."""
    return "! " if exp.get("warnings") else ""


def _show_warnings(exp: dict[str, Any]) -> None:
    """The experiment's warnings (search sanity: what its validations lack), one a line."""
    from rich.text import Text

    for warning in exp.get("warnings") or ():
        output.console.print(Text.assemble(("warning:", "yellow"), " ", str(warning)))


def _best_value(trial: dict[str, Any], name: str) -> float | None:
    best = trial.get("bestValidation") or {}
    return metric.number((best.get("metrics") or {}).get("avgMetrics"), name)


def _rank(trial: dict[str, Any], name: str, smaller_is_better: bool) -> tuple[int, float, int]:
    """Best trial first by the searcher metric; trials without a validation last, by id."""
    value = _best_value(trial, name)
    if value is None:
        return (1, 0.0, int(trial["id"]))
    return (0, metric.score(value, smaller_is_better), int(trial["id"]))


def _size(ck: dict[str, Any]) -> str:
    """A checkpoint's bytes (its resources' sizes) in binary units."""
    return byte_size.human(sum(byte_size.file_size(v)
                               for v in (ck.get("resources") or {}).values()))


def _held(exp: dict[str, Any]) -> str:
    """An experiment's checkpoints that hold files: their bytes, and how many (Determined's
    `checkpointSize`, an int64 as a string, and `checkpointCount`)."""
    try:
        size = int(exp.get("checkpointSize") or 0)
    except (TypeError, ValueError):
        size = 0
    return f"{byte_size.human(size)} ({exp.get('checkpointCount') or 0})"


async def action(c: Client, exp_id: int, verb: str) -> None:
    if verb in ("pause", "activate", "cancel", "kill"):
        state = output.state((await c.experiment(exp_id)).get("state"))
        if state in ("COMPLETED", "CANCELED", "ERROR", "DELETED"):
            output.console.print(f"Experiment {exp_id} has already ended ({state}): nothing to "
                                 f"{verb}")
            return
    try:
        await c.experiment_action(exp_id, verb)
    except DettuiError as exc:
        raise type(exc)(f"cannot {verb} experiment {exp_id}: {exc.message}") from exc
    past = {"pause": "Paused", "activate": "Activated", "cancel": "Canceled",
            "kill": "Killed", "archive": "Archived", "unarchive": "Unarchived"}[verb]
    output.console.print(f"{past} experiment {exp_id}")


async def delete(c: Client, exp_id: int, *, yes: bool) -> None:
    """Delete an ended experiment with its checkpoints, logs and metrics (asks first)."""
    if not await output.confirmed(
            yes, f"Delete experiment {exp_id} with all its checkpoints, logs and metrics?",
            f"deleting experiment {exp_id} removes its checkpoints, logs and metrics for good: "
            "add --yes to confirm (or archive it)"):
        return
    try:
        await c.delete_experiment(exp_id)
    except DettuiError as exc:
        raise type(exc)(f"cannot delete experiment {exp_id}: {exc.message}") from exc
    output.console.print(f"Deleted experiment {exp_id}")


async def set_priority(c: Client, exp_id: int, priority: int) -> None:
    await c.set_experiment_priority(exp_id, priority)
    output.console.print(f"Set priority of experiment {exp_id} to {priority}")


async def set_gc_policy(c: Client, exp_id: int, *, experiment_best: int, trial_best: int,
                        trial_latest: int, yes: bool, as_json: bool = False) -> None:
    policy = GcPolicy(experiment_best, trial_best, trial_latest)
    if not yes:
        doomed = await c.preview_gc(exp_id, policy)
        if as_json:
            output.print_json(doomed)
            return
        output.table(f"This policy deletes {len(doomed)} checkpoint(s) of experiment {exp_id}",
                     ["Trial ID", "UUID", "Steps", "Report Time"],
                     [(ck["TrialID"], ck["UUID"], ck["StepsCompleted"],
                       output.when(ck["ReportTime"])) for ck in doomed])
        output.console.print("Nothing changed. Run again with --yes to apply the policy.")
        return
    await c.set_gc_policy(exp_id, policy)
    output.console.print(f"Applied the GC policy to experiment {exp_id}")
