"""Which entrypoints name a file of the context, and the sentence for a missing one
(dettui/launch/entrypoint_files.py): refused only when surely a path in the context."""

from __future__ import annotations

import posixpath
import random
import time
from typing import Any

import pytest

from dettui.launch import entrypoint_files
from dettui.launch.entrypoint_files import missing

CONTEXT = [("train.py", False), ("model_def.py", False), ("pkg/__init__.py", False),
           ("pkg/mod.py", False), ("scripts/run.sh", False), ("data", True),
           ("app/__main__.py", False), ("ns/tool.py", False)]
TRIAN = "entrypoint names trian.py, which is not in the context (did you mean train.py?)"


@pytest.mark.parametrize(("entrypoint", "said"), [
    ("python3 trian.py", TRIAN),
    ("python trian.py", TRIAN),
    ("python3.11 -u -W ignore -X dev trian.py", TRIAN),
    ("FOO=1 python3 -OO trian.py", TRIAN),
    ("trian.py", TRIAN),
    ("./trian.py", TRIAN),
    (["python3", "trian.py", "--lr", "0.1"], TRIAN),
    ("python3 -m determined.launch.torch_distributed python3 trian.py", TRIAN),
    ("python3 -m dettui.launch.torch_distributed --nproc_per_node 2 -- python3 trian.py",
     TRIAN),
    ("python3 -m determined.launch.deepspeed python3 trian.py", TRIAN),
    ("python3 -m determined.launch.tensorflow --port 4 python3 trian.py", TRIAN),
    ("./scripts/rn.sh", "entrypoint names scripts/rn.sh, which is not in the context (did you "
                        "mean scripts/run.sh?)"),
    ("model_dfe:Trial", "entrypoint names module model_dfe (model_dfe.py or "
                        "model_dfe/__init__.py), which is not in the context (did you mean "
                        "model_def?)"),
    ("python3 -m determined.launch.horovod --autohorovod --trial model_dfe:Trial",
     "entrypoint names module model_dfe"),
    ("python3 -m pkg.mdo", "entrypoint names module pkg.mdo (pkg/mdo.py or pkg/mdo/__init__.py)"
                           ", which is not in the context (did you mean pkg.mod?)"),
    ("python3 -mpkg.nope", "entrypoint names module pkg.nope"),
    (["python3", "tr\x1b]0;x\x07ain.py"], "entrypoint names tr\\x1b]0;x\\x07ain.py, which"),
])
def test_a_missing_file_is_named(entrypoint: str | list[str], said: str) -> None:
    why = missing(entrypoint, CONTEXT)
    assert why is not None and why.startswith(said), why


@pytest.mark.parametrize("entrypoint", [
    "python3 train.py", "python3 ./train.py", "train.py", "model_def:Trial",
    "pkg.mod:Trial", "python3 -m pkg.mod", "python3 -m pkg", "python3 -m app", "python3 data",
    "python3 -m ns.tool", "python3 -m determined.launch.torch_distributed python3 train.py",
    "python3 -m determined.launch.torch_distributed --trial model_def:Trial",
    # not surely a path in the context: left alone
    "python3 -m http.server", "python3 -m torch.distributed.run --nproc_per_node 2 x.py",
    "python3 -c 'import x'", "sh -c 'python3 trian.py'", "bash run_me.sh",
    "torchrun trian.py", "cd pkg && python3 trian.py", "python3 $SCRIPT",
    "python3 /opt/code/trian.py", "python3 ../trian.py", "python3 ~/trian.py",
    "python3 -m determined.launch.torch_distributed --unknown-flag python3 trian.py",
    "python3 --weird-option trian.py", "python3 'unbalanced", "", None, ["python3"],
])
def test_left_alone(entrypoint: str | list[str] | None) -> None:
    assert missing(entrypoint, CONTEXT) is None


def test_no_context_or_a_startup_hook_is_left_alone() -> None:
    assert missing("python3 trian.py", []) is None  # an API client's: nothing to check
    assert missing("python3 trian.py", [*CONTEXT, ("startup-hook.sh", False)]) is None


def test_a_context_of_100000_files_is_checked_quickly() -> None:
    files = [(f"d{i // 1000}/f{i}.py", False) for i in range(100_000)]
    start = time.monotonic()
    why = missing("python3 d3/f5.py", files)
    assert why is not None and "d3/f5.py" in why, why
    assert missing("python3 d3/f3000.py", files) is None
    assert time.monotonic() - start < 30  # a no-hang bound


@pytest.mark.parametrize("odd", ["./train.py", "scripts//run.sh", "scripts/./run.sh",
                                 "pkg//mod.py", "ns/tool.py/", "./startup-hook.sh"])
def test_paths_in_odd_forms_are_found(odd: str) -> None:
    context = [(odd, False), ("other.py", False)]
    wanted = posixpath.normpath(odd)
    if wanted == "startup-hook.sh":  # a hook: any entrypoint is left alone
        assert missing("python3 trian.py", context) is None
    elif wanted.startswith("pkg/"):
        assert missing("python3 -m pkg.mod", context) is None
    else:
        assert missing(f"python3 {wanted}", context) is None


def _shuffled_names(n: int, size: int) -> list[str]:
    """`n` distinct names of about `size` characters, cut from one random string."""
    pool = random.Random(31).randbytes(size + 8 * n).hex()
    third = size // 3
    return [f"{pool[i * 16:i * 16 + third]}/{pool[i * 16 + third:i * 16 + 2 * third]}/"
            f"{pool[i * 16 + 2 * third:i * 16 + size - 4]}.py" for i in range(n)]


def test_a_did_you_mean_compares_few_short_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """A context of many long names (1 KB, shuffled): the suggestion compares at most
    MAX_SUGGESTION_CANDIDATES names of at most MAX_SUGGESTED characters (difflib took seconds
    on 5,000 such names), and still finds the typo's file."""
    compared: list[list[str]] = []
    real = entrypoint_files.difflib.get_close_matches

    def counting(word: str, possibilities: list[str], *args: Any, **kw: Any) -> list[str]:
        compared.append(list(possibilities))
        return real(word, possibilities, *args, **kw)

    monkeypatch.setattr(entrypoint_files.difflib, "get_close_matches", counting)
    long_names = _shuffled_names(20_000, 1024)
    short = [f"d/f{i}.py" for i in range(20_000)]
    files = [(name, False) for name in [*long_names, *short, "train.py"]]
    assert missing("python3 trian.py", files) == TRIAN
    assert missing(f"python3 {long_names[7][:-4]}x.py", files) is not None  # 1 KB: no guess
    assert missing("python3 -m trian", files) is None  # maybe installed: not checked
    assert missing("model_dfe:Trial", files) is not None
    assert len(compared) == 2  # the 1 KB name is compared with nothing
    for names in compared:
        assert len(names) <= entrypoint_files.MAX_SUGGESTION_CANDIDATES
        assert all(len(n) <= entrypoint_files.MAX_SUGGESTED for n in names)
    assert "train.py" in compared[0]


def test_suggestion_candidates_keep_the_near_ones() -> None:
    names = [f"deep/dir/n{i:05d}.py" for i in range(50_000)] + ["train.py", "x" * 300]
    kept = entrypoint_files.suggestion_candidates("trian.py", names)
    assert len(kept) == entrypoint_files.MAX_SUGGESTION_CANDIDATES
    assert kept[0] == "train.py"  # its own directory (the root) first
    assert entrypoint_files.suggestion_candidates("y" * 300, names) == []
    assert "x" * 300 not in entrypoint_files.suggestion_candidates("x" * 250, names)


def test_a_context_of_100000_long_names_is_checked_quickly() -> None:
    files = [(name, False) for name in _shuffled_names(100_000, 1024)] + [("train.py", False)]
    start = time.monotonic()
    assert missing("python3 trian.py", files) == TRIAN
    assert missing("python3 train.py", files) is None
    assert time.monotonic() - start < 10  # a no-hang bound (difflib alone took a minute)
