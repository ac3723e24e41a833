"""Every store function that writes is a command or a step (issue 30), read from the source.

A public function of dettui/master/store/*.py writes when its body holds SQL that changes rows
(INSERT, UPDATE, DELETE), opens a write transaction (`transaction(conn)`), or calls a function
of the store that writes (in its own module or another store module). Each such function is
marked `@command` (a state transition in one transaction of its own, returning `Effects` or
`Done[...]` for the dispatcher to perform) or `@step` (a building block written inside its
caller's transaction). Steps are the store's own business: no module of dettui outside
dettui/master/store names one. The list of commands is printed (`pytest -s`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

DETTUI = Path(__file__).resolve().parents[2] / "dettui"
STORE = DETTUI / "master" / "store"
STORE_PACKAGE = "dettui.master.store"
WRITES = re.compile(r"\b(INSERT|UPDATE|DELETE)\b")  # SQL's keywords, upper case as written
# Opening and migrating the store change its schema, not its state: no transition, no effects.
PLUMBING = {"db.connect", "db.migrate", "db.open_master", "pg.connect", "pg.migrate"}


@dataclass
class Function:
    name: str  # module.function
    decorators: set[str]
    returns: str  # its return annotation, as written ('' without one)
    writes: bool  # writes by itself (SQL, a transaction)
    calls: set[str] = field(default_factory=set)  # store functions it calls, module.function


def _docstring_nodes(fn: ast.FunctionDef) -> set[int]:
    first = fn.body[0] if fn.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        return {id(first.value)}
    return set()


def _text(node: ast.AST) -> str | None:
    """A string literal's text (an f-string's literal parts), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return " ".join(v.value for v in node.values
                        if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return None


def _store_names(tree: ast.Module) -> tuple[dict[str, str], dict[str, str]]:
    """The store modules a module imports (alias -> module) and the store functions it
    imports by name (name -> module.function)."""
    modules: dict[str, str] = {}
    functions: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == STORE_PACKAGE:
            for alias in node.names:
                modules[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                STORE_PACKAGE + "."):
            module = (node.module or "").rsplit(".", 1)[1]
            for alias in node.names:
                functions[alias.asname or alias.name] = f"{module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(STORE_PACKAGE + ".") and alias.asname:
                    modules[alias.asname] = alias.name.rsplit(".", 1)[1]
    return modules, functions


def references(tree: ast.Module) -> set[str]:
    """The store functions a module names (module.function): `alias.fn` of an imported store
    module, or a name imported from one."""
    modules, functions = _store_names(tree)
    found = set(functions.values())
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in modules:
            found.add(f"{modules[node.value.id]}.{node.attr}")
    return found


def functions_of(module: str, source: str) -> dict[str, Function]:
    """The module-level functions of a store module's source, with what each calls."""
    tree = ast.parse(source)
    modules, imported = _store_names(tree)
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    out = {}
    for name, fn in defs.items():
        docs = _docstring_nodes(fn)
        writes, calls = False, set()
        for node in ast.walk(fn):
            text = _text(node) if id(node) not in docs else None
            if text is not None and WRITES.search(text):
                writes = True
            if isinstance(node, ast.Call):
                callee = node.func
                if isinstance(callee, ast.Name) and callee.id == "transaction":
                    writes = True
                elif isinstance(callee, ast.Name) and callee.id in defs:
                    calls.add(f"{module}.{callee.id}")
                elif isinstance(callee, ast.Name) and callee.id in imported:
                    calls.add(imported[callee.id])
                elif isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name) \
                        and callee.value.id in modules:
                    calls.add(f"{modules[callee.value.id]}.{callee.attr}")
        decorators = {ast.unparse(d).rsplit(".", 1)[-1] for d in fn.decorator_list}
        out[f"{module}.{name}"] = Function(f"{module}.{name}", decorators,
                                           ast.unparse(fn.returns) if fn.returns else "",
                                           writes, calls)
    return out


def writers(sources: dict[str, str]) -> dict[str, Function]:
    """The functions of these store modules (name -> source) that write, directly or through
    the store functions they call, public or not."""
    every: dict[str, Function] = {}
    for module, source in sources.items():
        every.update(functions_of(module, source))
    found = {name for name, fn in every.items() if fn.writes}
    grew = True
    while grew:
        grew = False
        for name, fn in every.items():
            if name not in found and fn.calls & found:
                found.add(name)
                grew = True
    return {name: every[name] for name in sorted(found)}


def problems(sources: dict[str, str]) -> list[str]:
    """What breaks the rule: public writers neither command nor step, commands that return
    something else than Effects or Done[...], functions marked both."""
    out = []
    for name, fn in writers(sources).items():
        if name.rsplit(".", 1)[1].startswith("_") or name in PLUMBING:
            continue
        kinds = fn.decorators & {"command", "step"}
        if not kinds:
            out.append(f"{name} writes but is neither @command nor @step")
        elif len(kinds) == 2:
            out.append(f"{name} is marked both @command and @step")
        elif "command" in kinds and not (fn.returns == "Effects"
                                         or fn.returns.startswith("Done[")):
            out.append(f"{name} is a @command returning {fn.returns or 'nothing said'}, "
                       "not Effects or Done[...]")
    return out


def store_sources() -> dict[str, str]:
    return {p.stem: p.read_text() for p in sorted(STORE.glob("*.py")) if p.stem != "__init__"}


def commands(sources: dict[str, str]) -> list[str]:
    return [name for module, source in sources.items()
            for name, fn in functions_of(module, source).items() if "command" in fn.decorators]


def steps(sources: dict[str, str]) -> set[str]:
    return {name for module, source in sources.items()
            for name, fn in functions_of(module, source).items() if "step" in fn.decorators}


def test_every_store_function_that_writes_is_a_command_or_a_step() -> None:
    assert problems(store_sources()) == []


def test_the_commands_are_listed() -> None:
    found = commands(store_sources())
    print("\nstore commands:\n  " + "\n  ".join(found))
    assert found and {"control.stop", "exits.part_exit", "users.create",
                      "experiments.update_fields", "experiments.delete"} <= set(found)


def test_no_module_outside_the_store_names_a_step() -> None:
    inside = steps(store_sources())
    assert inside, "the store has steps (ids.next_id, exits.settle, ...)"
    named = {}
    for path in sorted(DETTUI.rglob("*.py")):
        if STORE in path.parents:
            continue
        for ref in references(ast.parse(path.read_text(), str(path))) & inside:
            named.setdefault(ref, []).append(str(path.relative_to(DETTUI.parent)))
    assert named == {}


SYNTHETIC = '''
from dettui.master.store import other
from dettui.master.store.tx import command, step, transaction

def reads(conn):
    """Nothing to UPDATE here: a docstring is not SQL."""
    return conn.execute("SELECT 1").fetchone()

def unmarked(conn):
    with transaction(conn):
        _helper(conn)

def _helper(conn):
    conn.execute("DELETE FROM t")

def through_another_module(conn):
    return other.write_it(conn)

@command
def says_nothing(conn):
    conn.execute(f"UPDATE t SET {1}")

@command
def fine(conn) -> Done[int]:
    with transaction(conn):
        return Done(1)

@step
def building_block(conn) -> None:
    conn.execute("INSERT INTO t VALUES (1)")
'''
OTHER = '''
from dettui.master.store.tx import step

@step
def write_it(conn) -> None:
    conn.execute("UPDATE t SET a=1")
'''


def test_the_check_finds_what_breaks_the_rule() -> None:
    """The scan on a module written to break it: each fault is named, nothing else."""
    sources = {"mod": SYNTHETIC, "other": OTHER}
    assert set(writers(sources)) == {"mod.unmarked", "mod._helper", "mod.through_another_module",
                                     "mod.says_nothing", "mod.fine", "mod.building_block",
                                     "other.write_it"}
    assert problems(sources) == [
        "mod.says_nothing is a @command returning nothing said, not Effects or Done[...]",
        "mod.through_another_module writes but is neither @command nor @step",
        "mod.unmarked writes but is neither @command nor @step",
    ]
    assert commands(sources) == ["mod.says_nothing", "mod.fine"]
    outside = ast.parse("from dettui.master.store import other as o\n"
                        "from dettui.master.store.mod import building_block\n"
                        "o.write_it\n")
    assert references(outside) & steps(sources) == {"other.write_it", "mod.building_block"}


@pytest.mark.parametrize("module", sorted(p.stem for p in STORE.glob("*.py")))
def test_the_marks_are_those_the_runtime_sees(module: str) -> None:
    """What the scan reads as @command or @step is what `Database.run` and the dispatcher see
    (the decorators' attributes), for each store module."""
    import importlib

    loaded = importlib.import_module(f"{STORE_PACKAGE}.{module}")
    found = functions_of(module, (STORE / f"{module}.py").read_text())
    for name, fn in found.items():
        obj = getattr(loaded, name.rsplit(".", 1)[1])
        assert getattr(obj, "store_command", False) == ("command" in fn.decorators), name
        assert getattr(obj, "store_step", False) == ("step" in fn.decorators), name
