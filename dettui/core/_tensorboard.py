"""TensorBoard events of a trial's reported metrics, as Determined's harness writes them
(`determined.tensorboard.BatchMetricWriter`): scalars tagged `Determined/<name>`, validation
ones `Determined/val_<name>`, batch metrics at their own steps.

The events go straight into the trial's TensorBoard directory in checkpoint storage
(`<storage>/<cluster>/tensorboard/experiment/E/trial/T`, where Determined uploads them), on the
metrics thread. Only where the trial's Python has the `tensorboard` package (looked up, not
imported); without it nothing is written and one debug line says so. The few protobuf fields
of a scalar event and the TFRecord framing (masked CRC32-C) are encoded here, in the stdlib:
tensorboard's own writer imports all of its summary plugins (over a second), and core stays
free of protobuf.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import socket
import struct
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("dettui.core")


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """The checksum TFRecord files carry: CRC32-C, rotated and offset."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record(data: bytes) -> bytes:
    """One TFRecord: length, its checksum, the data, its checksum."""
    length = struct.pack("<Q", len(data))
    return (length + struct.pack("<I", masked_crc32c(length)) + data +
            struct.pack("<I", masked_crc32c(data)))


def is_scalar(value: Any) -> bool:
    """What Determined writes: ints, floats and numpy number scalars."""
    if isinstance(value, int | float):
        return True
    return getattr(value, "ndim", None) == 0 and getattr(value, "dtype", None) is not None \
        and getattr(value.dtype, "kind", "") in "biuf"


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64 as protobuf sends it
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (a string or an embedded message)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def event(wall_time: float, step: int = 0, file_version: str = "",
          tag: str = "", value: float = 0.0) -> bytes:
    """A serialized `tensorflow.Event`: the file's version line, or one scalar summary
    (Event: 1 wall_time, 2 step, 3 file_version, 5 summary; Summary: 1 value;
    Summary.Value: 1 tag, 2 simple_value)."""
    out = b"\x09" + struct.pack("<d", wall_time)
    if step:
        out += b"\x10" + _varint(step)
    if file_version:
        return out + _field(3, file_version.encode())
    scalar = _field(1, tag.encode()) + b"\x15" + struct.pack("<f", value)
    return out + _field(5, _field(1, scalar))


class EventWriter:
    """Scalars to one event file under `logdir`, opened on the first write."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self._file: Any = None

    def _open(self) -> None:
        self.logdir.mkdir(parents=True, exist_ok=True)
        name = (f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
                f"{os.getpid()}.0")
        self._file = open(self.logdir / name, "ab")  # noqa: SIM115 - kept open until close()
        self._file.write(record(event(time.time(), file_version="brain.Event:2")))

    def add_scalar(self, tag: str, value: Any, step: int) -> None:
        if self._file is None:
            self._open()
        self._file.write(record(event(time.time(), int(step), tag=tag, value=float(value))))

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class MetricWriter:
    """Determined's BatchMetricWriter over an EventWriter: what `report_*_metrics` reported."""

    def __init__(self, logdir: Path) -> None:
        self.events = EventWriter(logdir)

    def _scalar(self, name: str, value: Any, step: int) -> None:
        if is_scalar(value):
            self.events.add_scalar("Determined/" + name, value, step)

    def on_train_step_end(self, steps_completed: int, metrics: dict[str, Any],
                          batch_metrics: list[dict[str, Any]] | None = None) -> None:
        seen = set()
        for i, batch in enumerate(batch_metrics or []):
            for name, value in batch.items():
                self._scalar(name, value, steps_completed - len(batch_metrics or []) + i)
                seen.add(name)
        for name, value in metrics.items():
            if name not in seen:
                self._scalar(name, value, steps_completed)

    def on_validation_step_end(self, steps_completed: int, metrics: dict[str, Any]) -> None:
        for name, value in metrics.items():
            self._scalar(name if name.startswith("val") else "val_" + name, value,
                         steps_completed)

    def write(self, group: str, steps_completed: int, metrics: dict[str, Any],
              batch_metrics: list[dict[str, Any]] | None) -> None:
        """One report; Determined writes the training and validation groups only."""
        if group == "training":
            self.on_train_step_end(steps_completed, metrics, batch_metrics)
        elif group == "validation":
            self.on_validation_step_end(steps_completed, metrics)

    def flush(self) -> None:
        self.events.flush()

    def close(self) -> None:
        self.events.close()


def metric_writer(logdir: Path | None) -> MetricWriter | None:
    """A writer into `logdir`, or None where the trial's Python has no tensorboard package
    (found without importing it)."""
    if logdir is None:
        return None
    if importlib.util.find_spec("tensorboard") is None:
        log.debug("no tensorboard package here: reported metrics are not written as "
                  "TensorBoard events")
        return None
    return MetricWriter(logdir)
