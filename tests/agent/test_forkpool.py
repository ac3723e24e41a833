"""Which trials the fork server may start, decided before any fork (forkpool), and the server's
own rules that do not need a trial: a Python script or module run by the server's own Python
is forked, anything a fresh interpreter would run differently starts fresh with its reason; a
venv's python is not the system's even when it is the same binary; a module the trial could put
first on sys.path shadows the preloaded one; a file made where a loaded module came from makes
the server stale; a SystemExit ends the child with the code python gives it."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from dettui.agent import forkpool, forkserver
from dettui.launch import forkable, inproc

PYTHON = sys.executable
PATH = os.path.dirname(PYTHON)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    w = tmp_path / "work"
    (w / "pkg").mkdir(parents=True)
    (w / "train.py").write_text("print('hi')\n")
    (w / "pkg" / "__init__.py").write_text("")
    (w / "pkg" / "mod.py").write_text("print('mod')\n")
    return w


def shadows(why: str | None, name: str, module: str) -> bool:
    """Whether `why` says that the trial's `name` would be imported instead of `module`."""
    return why is not None and f"{name} would be imported instead of" in why \
        and why.endswith(f" {module}")


def run_of(argv: list[str], work: Path, path: str = PATH) -> tuple[forkable.Run | None, str]:
    return forkpool.python_run(argv, work, path, PYTHON)


# --- python_run: what is forked ----------------------------------------------------------

@pytest.mark.parametrize(("argv", "kind", "target", "args"), [
    (["sh", "-c", "python3 train.py"], "script", "train.py", ()),
    (["sh", "-c", "python3 train.py --lr 0.1 'two words'"], "script", "train.py",
     ("--lr", "0.1", "two words")),
    (["python3", "train.py", "x"], "script", "train.py", ("x",)),  # a list entrypoint
    (["sh", "-c", "python3 -u train.py"], "script", "train.py", ()),
    (["sh", "-c", "python3 -m pkg.mod a b"], "module", "pkg.mod", ("a", "b")),
    ([PYTHON, "-m", "pkg.mod"], "module", "pkg.mod", ()),
], ids=["line", "line-args", "list", "unbuffered", "module", "absolute-python"])
def test_a_python_script_or_module_of_the_servers_python_is_forked(
        work: Path, argv: list[str], kind: str, target: str, args: tuple[str, ...]) -> None:
    run, why = run_of(argv, work)
    assert why == ""
    assert run is not None
    assert (run.kind, run.target, run.args) == (kind, target, args)
    assert run.title.split()[0] in ("python3", PYTHON)


@pytest.mark.parametrize(("argv", "reason"), [
    (["sh", "-c", "python3 train.py && echo done"], "the entrypoint is a shell line"),
    (["sh", "-c", "python3 train.py > out"], "the entrypoint is a shell line"),
    (["sh", "-c", "python3 $SCRIPT"], "the entrypoint is a shell line"),
    (["sh", "-c", "python3 train.py", "extra"], "the entrypoint passes arguments to sh"),
    (["sh", "-c", "python3 'train.py"], "the entrypoint's quotes are unbalanced"),
    (["sh", "-c", "OMP_NUM_THREADS=1 python3 train.py"], "the entrypoint sets a variable first"),
    (["python3", "-c", "print(1)"], "python runs with the option -c"),
    (["sh", "-c", "python3"], "python runs with the option (none)"),
    (["sh", "-c", "python3 trian.py"], "trian.py is not a file of the context"),
    (["sh", "-c", "python3 pkg"], "pkg is not a file of the context"),
    (["bash", "train.sh"], "bash is "),
    (["sh", "-c", "nosuchprogram train.py"], "nosuchprogram is not found"),
    ([], "the entrypoint is empty"),
])
def test_anything_else_starts_fresh_with_its_reason(work: Path, argv: list[str],
                                                   reason: str) -> None:
    run, why = run_of(argv, work)
    assert run is None
    assert why.startswith(reason), why


def test_a_shell_line_names_what_makes_it_one(work: Path) -> None:
    _, why = run_of(["sh", "-c", "python3 train.py && echo"], work)
    assert "'&'" in why, why


# --- interpreter: a venv is not the system's Python ---------------------------------------

def _venv(where: Path, binary: str) -> Path:
    """A venv as `python -m venv` lays it out: bin/python3 a link to `binary`, pyvenv.cfg."""
    (where / "bin").mkdir(parents=True)
    (where / "pyvenv.cfg").write_text(f"home = {os.path.dirname(binary)}\n")
    python = where / "bin" / "python3"
    python.symlink_to(binary)
    return python


def test_a_venvs_python_is_not_the_system_python_with_the_same_binary(tmp_path: Path) -> None:
    binary = os.path.realpath(PYTHON)
    one, two = _venv(tmp_path / "one", binary), _venv(tmp_path / "two", binary)
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "python3").symlink_to(binary)
    plain = plain / "python3"
    assert forkable.interpreter(str(one))[0] == forkable.interpreter(str(plain))[0] == binary
    assert forkable.interpreter(str(plain)) == (binary, "")
    assert forkable.interpreter(str(one)) == (binary, str((tmp_path / "one").resolve()))
    assert forkable.interpreter(str(one)) != forkable.interpreter(str(two))
    assert forkable.interpreter(str(one)) != forkable.interpreter(str(plain))
    # pyvenv.cfg next to the python (a venv made with --copies on some systems) counts too
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (flat / "python3").symlink_to(binary)
    assert forkable.interpreter(str(flat / "python3"))[1] == str(flat.resolve())


def test_python3_of_another_venv_on_the_trials_path_starts_fresh(work: Path,
                                                                 tmp_path: Path) -> None:
    other = _venv(tmp_path / "other", os.path.realpath(PYTHON))
    run, why = run_of(["sh", "-c", "python3 train.py"], work,
                      path=f"{other.parent}{os.pathsep}{PATH}")
    assert run is None
    assert why == f"python3 is {other}, not the fork server's Python ({PYTHON})"
    # the same PATH with the server's own directory first: forked
    run, why = run_of(["sh", "-c", "python3 train.py"], work,
                      path=f"{PATH}{os.pathsep}{other.parent}")
    assert run is not None and why == ""


def test_a_relative_path_entry_is_the_work_dirs(work: Path) -> None:
    shutil.copy(os.path.realpath(PYTHON), work / "mypython")  # a copy: another binary
    run, why = run_of(["sh", "-c", "mypython train.py"], work, path=f".{os.pathsep}{PATH}")
    assert run is None and why.startswith(f"mypython is {work}/mypython, not"), why


# --- shadowing: a module the trial would import instead of the preloaded one --------------

@pytest.mark.parametrize(("make", "shadowed"), [
    ({"json.py": "x = 1\n"}, True),
    ({"json.cpython-311-x86_64-linux-gnu.so": ""}, True),
    ({"json/__init__.py": ""}, True),
    ({"json/other.py": ""}, False),  # a namespace directory: the preloaded json stays first
    ({"json.pth": ""}, False),
    ({"json.txt": ""}, False),
    ({"jsonx.py": ""}, False),
    ({"torch.py": ""}, False),  # not loaded by this server
])
def test_a_module_the_server_loaded_is_shadowed_by_the_trials(
        tmp_path: Path, make: dict[str, str], shadowed: bool) -> None:
    for name, text in make.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    why = forkpool.shadowing([tmp_path / "missing", tmp_path], {"json", "os"})
    if shadowed:
        assert shadows(why, next(iter(make)).split("/")[0], "json"), why
    else:
        assert why is None


# --- why_fresh: the trial's environment and sys.path -------------------------------------

INFO = {"ready": True, "modules": ["json", "os", "dettui"], "user_site": False,
        "version": [3, 11, 0]}


def why(work: Path, env: dict[str, str], argv: list[str] | None = None,
        info: dict[str, object] | None = None, home: str | None = None,
        agent_env: dict[str, str] | None = None) -> str | None:
    run, reason = run_of(argv or ["sh", "-c", "python3 train.py"], work)
    return forkpool.why_fresh(run, reason, env, work, INFO if info is None else info, home,
                              agent_env or {})


def test_a_plain_trial_may_be_forked(work: Path, tmp_path: Path) -> None:
    honoured = {"PYTHONPATH": str(tmp_path / "libs"), "PYTHONUNBUFFERED": "1",
                "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "DET_TRIAL_ID": "3"}
    assert why(work, honoured) is None
    assert why(work, {}, ["sh", "-c", "python3 -m pkg.mod"]) is None


@pytest.mark.parametrize(("env", "reason"), [
    ({"PYTHONHASHSEED": "1"}, "PYTHONHASHSEED is set (read only when an interpreter starts)"),
    ({"PYTHONWARNINGS": "error"}, "PYTHONWARNINGS is set (read only when an interpreter starts)"),
    ({"PYTHONSAFEPATH": "1"}, "PYTHONSAFEPATH is set (read only when an interpreter starts)"),
    ({"LD_PRELOAD": "/lib/x.so"}, "LD_PRELOAD is set"),
    ({"LD_AUDIT": "/lib/x.so"}, "LD_AUDIT is set"),
    ({"LD_LIBRARY_PATH": "/opt/lib"}, "LD_LIBRARY_PATH differs from the agent's"),
])
def test_a_start_up_variable_starts_fresh(work: Path, env: dict[str, str], reason: str) -> None:
    assert why(work, env) == reason


def test_the_agents_own_library_path_and_an_empty_preload_are_no_reason(work: Path) -> None:
    assert why(work, {"LD_LIBRARY_PATH": "/opt/lib", "LD_PRELOAD": ""},
               agent_env={"LD_LIBRARY_PATH": "/opt/lib"}) is None


def test_the_scripts_directory_or_pythonpath_holding_a_preloaded_module_starts_fresh(
        work: Path, tmp_path: Path) -> None:
    (work / "sub").mkdir()
    (work / "sub" / "train.py").write_text("")
    (work / "sub" / "json.py").write_text("")
    assert shadows(why(work, {}, ["sh", "-c", "python3 sub/train.py"]), "json.py", "json")
    assert why(work, {}) is None  # train.py's own directory has no json.py
    libs = tmp_path / "libs"
    (libs / "dettui").mkdir(parents=True)
    (libs / "dettui" / "__init__.py").write_text("")
    assert shadows(why(work, {"PYTHONPATH": f"/nonexistent{os.pathsep}{libs}"}), "dettui",
                   "dettui")
    # `-m` puts the work dir first
    (work / "os.py").write_text("")
    assert shadows(why(work, {}, ["sh", "-c", "python3 -m pkg.mod"]), "os.py", "os")


def test_a_user_site_packages_starts_fresh_where_python_would_read_it(work: Path,
                                                                      tmp_path: Path) -> None:
    home = tmp_path / "home"
    site = home / ".local" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    assert why(work, {}, info={**INFO, "user_site": True}, home=str(home)) == \
        f"{site} may hold other packages"
    assert why(work, {}, info={**INFO, "user_site": False}, home=str(home)) is None
    assert why(work, {}, info={**INFO, "user_site": True}, home=str(tmp_path / "nohome")) is None


def test_no_run_keeps_the_reason_python_run_gave(work: Path) -> None:
    assert why(work, {}, ["sh", "-c", "python3 train.py | tee x"]) == \
        "the entrypoint is a shell line (it holds '|')"


# --- the agent's mode ---------------------------------------------------------------------

def test_the_option_wins_over_the_environment_and_fork_is_the_default(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(forkpool.MODE_VAR, raising=False)
    assert forkpool.mode(None) == "fork"
    assert forkpool.mode("fresh") == "fresh"
    monkeypatch.setenv(forkpool.MODE_VAR, "fresh")
    assert forkpool.mode(None) == "fresh"
    assert forkpool.mode("fork") == "fork"
    monkeypatch.setenv(forkpool.MODE_VAR, "sometimes")
    assert forkpool.mode(None) == "fork"


# --- forkserver.Watch: a change on disk makes the server stale ----------------------------

def _changed(watch: forkserver.Watch, timeout: float = 2.0) -> str | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = watch.changed()
        if found is not None:
            return found
        time.sleep(0.01)
    return None


def test_a_module_file_made_in_a_watched_directory_makes_the_server_stale(
        tmp_path: Path) -> None:
    lib, other = tmp_path / "lib", tmp_path / "other"
    lib.mkdir()
    other.mkdir()
    (lib / "loaded.py").write_text("")
    watch = forkserver.Watch([str(lib / "loaded.py")])
    assert watch.fd >= 0 and list(watch.dirs.values()) == [str(lib)]
    (lib / "notes.txt").write_text("x")  # not a module
    (other / "new.py").write_text("x")  # not watched
    assert _changed(watch, 0.3) is None
    (lib / "new.py").write_text("x")
    assert _changed(watch) == f"{lib / 'new.py'} changed"
    (lib / "loaded.py").write_text("changed = 1\n")
    assert _changed(watch) == f"{lib / 'loaded.py'} changed"
    (lib / "ext.so").write_bytes(b"")
    assert _changed(watch) == f"{lib / 'ext.so'} changed"
    (lib / "new.py").unlink()
    assert _changed(watch) == f"{lib / 'new.py'} changed"
    (lib / "loaded.py").rename(lib / "renamed.txt")
    assert _changed(watch) == f"{lib / 'loaded.py'} changed"


def test_a_watched_directory_moved_away_makes_the_server_stale(tmp_path: Path) -> None:
    lib = tmp_path / "site-packages"
    lib.mkdir()
    (lib / "m.py").write_text("")
    watch = forkserver.Watch([str(lib / "m.py")])
    lib.rename(tmp_path / "gone")
    assert _changed(watch) == f"{lib} was removed or moved"


# --- exit codes as the interpreter gives them ---------------------------------------------

@pytest.mark.parametrize(("value", "code", "printed"), [
    (None, 0, ""),
    (0, 0, ""),
    (3, 3, ""),
    (255, 255, ""),
    (256 + 7, 7, ""),
    (-1, 255, ""),
    (True, 1, ""),
    ("bad input", 1, "bad input\n"),
    (["x"], 1, "['x']\n"),
])
def test_a_system_exit_ends_the_child_as_python_would(
        capsys: pytest.CaptureFixture[str], value: object, code: int, printed: str) -> None:
    assert inproc.exit_code(SystemExit(value)) == code
    out = capsys.readouterr()
    assert out.err == printed and out.out == ""
