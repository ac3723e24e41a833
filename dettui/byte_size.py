"""Sizes in bytes, read from and written for people: "50GiB" in a config, "1.2 GiB" in a table.

Binary prefixes (KiB, MiB, GiB, TiB, PiB) and their one-letter forms (K, M, G, T, P, as Slurm
and Docker read them) are powers of 1024; SI prefixes (KB, MB, GB, TB, PB) are powers of 1000,
as the standard says. Case does not matter ("50gib"). A bare integer is bytes.
"""

from __future__ import annotations

import re

_UNITS = {"": 1, "b": 1}
for _i, _p in enumerate("kmgtp", start=1):
    _UNITS[_p] = _UNITS[_p + "ib"] = 1024 ** _i
    _UNITS[_p + "b"] = 1000 ** _i
_SIZE = re.compile(r"\s*([0-9]{1,15}(?:\.[0-9]{1,6})?)\s*([a-zA-Z]{0,3})\s*")
MAX = 2 ** 62  # the largest size anything here holds: an int64 with room for sums


def parse(value: str | int) -> int:
    """Bytes from "50GiB", "1.5 TB", "500M" or 1000000; ValueError says what is accepted."""
    if isinstance(value, bool):
        raise ValueError("a size, such as 50GiB, 500MiB or a number of bytes; not a boolean")
    if isinstance(value, int):
        number, unit = float(value), ""
        if not 0 <= value <= MAX:
            raise ValueError(f"must be between 0 and {MAX} bytes")
    else:
        m = _SIZE.fullmatch(value)
        if m is None or m.group(2).lower() not in _UNITS:
            raise ValueError(f"{value[:40]!r} is not a size: use a number and a unit such as "
                             "50GiB, 500MiB, 2TB, or a number of bytes")
        number, unit = float(m.group(1)), m.group(2).lower()
    size = int(number * _UNITS[unit])
    if size > MAX:
        raise ValueError(f"{value!r} is more than {human(MAX)}")
    return size


def human(size: int) -> str:
    """`size` bytes in binary units, one decimal: '512 B', '1.5 KiB', '12.0 GiB'."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"  # not reached


_DIGITS = re.compile(r"[0-9]{1,18}")


def file_size(text: object) -> int:
    """One file's size in a checkpoint's resources (a string of decimal digits, as Determined
    sends): anything else (negative, signed, fractional, other digits) counts as 0 bytes, so
    a report cannot lower a usage it adds to."""
    return int(text) if isinstance(text, str) and _DIGITS.fullmatch(text) else 0
