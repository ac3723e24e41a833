"""Determined's rules for a run's metadata (`POST /api/v1/runs/{id}/metadata`, what
`core.train.set_metadata` sends): a JSON object whose flattened keys are checked as the 0.38
master checks them (`master/internal/run/metadata.go`). Pure."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from dettui.errors import InvalidArgument

MAX_STRING = 5000  # characters of a string value (timestamps are exempt, as in Determined)
MAX_KEY = 50  # characters of one key
MAX_ARRAY = 100  # elements of one array
MAX_DEPTH = 10  # levels of nesting
MAX_KEYS = 1000  # flattened keys of one run
EXCLUDED = re.compile(r"[$.\[\]]")


def check(metadata: dict[str, Any]) -> None:
    """InvalidArgument, worded as Determined's, if `metadata` breaks a rule."""
    leaves = 0
    stack: list[tuple[str, Any, int]] = [("", metadata, 0)]
    while stack and leaves <= MAX_KEYS:
        key, value, depth = stack.pop()
        _check_entry(key, depth)
        if isinstance(value, dict) and value:
            stack.extend((str(k), v, depth + 1) for k, v in value.items())
        elif isinstance(value, list) and value:
            if len(value) > MAX_ARRAY:
                _refuse(f"metadata array exceeds maximum length of {len(value)}/{MAX_ARRAY} "
                        "elements")
            stack.extend((key, v, depth + 1) for v in value)
        else:
            if isinstance(value, str) and len(value) > MAX_STRING and not _timestamp(value):
                _refuse(f"metadata value exceeds maximum length of {MAX_STRING} characters")
            leaves += 1
    if leaves > MAX_KEYS:
        raise InvalidArgument(f"request exceeds run metadata key count limit of {MAX_KEYS}")


def _check_entry(key: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        _refuse(f"metadata exceeds maximum nesting depth of {MAX_DEPTH}")
    if len(key) > MAX_KEY:
        _refuse(f"metadata key exceeds maximum length of {MAX_KEY} characters")
    if EXCLUDED.search(key):
        _refuse("metadata keys can not contain the following character(s): $ . [ ]")


def _timestamp(value: str) -> bool:
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _refuse(why: str) -> None:
    raise InvalidArgument(f"error flattening metadata: {why}")
