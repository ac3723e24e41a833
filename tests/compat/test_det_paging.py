"""The real `det` CLI pages through dettui's lists (read_paginated: offset = endIndex while
endIndex < total): `det e list` and `det job list` with pages smaller than the list."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.compat.test_det_cli import DET_VENV, det
from tests.conftest import Served

pytestmark = pytest.mark.skipif(not DET_VENV, reason="run through `make test` "
                                "(needs the determined venv)")
CONFIG = """
name: paged
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: {batches: 10}}
"""


def test_det_reads_every_page(headless: Served, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    made = [headless.api("POST", "/api/v1/experiments", {
        "config": CONFIG.replace("paged", f"paged-{i}"), "activate": True,
        "modelDefinition": []})["experiment"]["id"] for i in range(5)]
    assert det(headless, home, "user", "login", "determined", stdin="\n").returncode == 0

    every = det(headless, home, "experiment", "list", "--all", "--limit", "2")
    assert every.returncode == 0, every.stderr
    assert sorted(int(x) for x in re.findall(r"^\s*(\d+)\s*\|", every.stdout, re.M)) == made
    one = det(headless, home, "experiment", "list", "--all", "--limit", "2", "--pages", "1")
    assert [int(x) for x in re.findall(r"^\s*(\d+)\s*\|", one.stdout, re.M)] == made[:2]

    jobs = det(headless, home, "job", "list", "--limit", "2")
    assert jobs.returncode == 0, jobs.stderr
    named = re.findall(r"paged-(\d) \((\d+)\)", jobs.stdout)
    assert [int(e) for _, e in named] == made, jobs.stdout  # queue order, all three pages
    back = det(headless, home, "job", "list", "--limit", "2", "--reverse")
    assert [int(e) for _, e in re.findall(r"paged-(\d) \((\d+)\)", back.stdout)] == made[::-1]
