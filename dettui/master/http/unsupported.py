"""Features of Determined that dettui does not offer: their routes answer 501 with one sentence
saying what to use instead (the real `det` CLI prints it as `Failed to <command>: <sentence>`),
whoever asks, rather than "no such route"."""

from __future__ import annotations

from dettui.errors import Unimplemented

_REGISTRY = ("the model registry is", "download checkpoints with `det checkpoint download` or "
             "`dettui checkpoint download`")
_PROJECTS = ("workspaces and projects are",
             "every experiment is in one project; tell them apart by name")
_TEMPLATES = ("config templates are", "keep shared settings in the config file, or override "
              "keys with --config KEY=VALUE")
_RBAC = ("RBAC is", "dettui has Determined's basic model: owners and admins change things")
# path prefix under /api/v1/ -> (what, what to use instead)
FEATURES: dict[str, tuple[str, str]] = {
    "models": _REGISTRY, "model": _REGISTRY,
    "workspaces": _PROJECTS, "projects": _PROJECTS,
    "templates": _TEMPLATES, "template": _TEMPLATES,
    "notebooks": ("notebooks are", "run Jupyter on your machine"),
    "shells": ("shells are", "use ssh to the agent's machine"),
    "commands": ("commands are", "run the command as an experiment's entrypoint"),
    "generic-tasks": ("generic tasks are", "run the work as an experiment's entrypoint"),
    "tensorboards": ("TensorBoard instances are", "run `tensorboard --logdir <checkpoint "
                     "storage>/<cluster id>/tensorboard` on your machine"),
    "groups": ("user groups are", "give each user an account of their own (`det user create`)"),
    "roles": _RBAC, "permissions": _RBAC,
    "webhooks": ("webhooks are", "follow experiments with `dettui e create --follow` or the "
                 "dashboard"),
    "tokens": ("access tokens are", "log in with `det user login` (sessions last 7 days)"),
}


# Lists dettui answers although the feature is not offered: its one workspace (every
# experiment is in it), and no templates (`det template list`, which reads both).
ANSWERED = {("GET", "/api/v1/workspaces"), ("GET", "/api/v1/templates")}


# Single operations dettui does not offer, with what to do instead.
_RAW = ("per-workload usage (`det resources raw`) is", "`det resources allocations` lists each "
        "allocation's slot-hours")
OPERATIONS: dict[tuple[str, str], tuple[str, str]] = {
    ("PATCH", "/api/v1/master/config"): (
        "changing the master config while it runs is", "set DETTUI_LOG_LEVEL or edit "
        "master.yaml and restart `dettui serve`"),
    ("PUT", "/api/v1/master/cluster_message"): (
        "cluster-wide messages are", "tell users through your usual channel"),
    ("GET", "/api/v1/resources/allocation/raw"): _RAW,
    ("GET", "/resources/allocation/raw"): _RAW,
}


def check(path: str, method: str = "GET") -> None:
    """Raise Unimplemented if `path` belongs to a feature dettui does not offer."""
    operation = OPERATIONS.get((method, path))
    if operation is not None:
        what, instead = operation
        raise Unimplemented(f"{what} not supported by dettui: {instead}")
    if not path.startswith("/api/v1/") or (method, path) in ANSWERED:
        return
    feature = FEATURES.get(path[len("/api/v1/"):].split("/", 1)[0])
    if feature is not None:
        what, instead = feature
        raise Unimplemented(f"{what} not supported by dettui: {instead}")


def template(name: str | None) -> None:
    """`det e create --template NAME`: there are no templates to take settings from."""
    if name:
        what, instead = _TEMPLATES
        raise Unimplemented(f"{what} not supported by dettui (--template {name[:80]!r}): "
                            f"{instead}")
