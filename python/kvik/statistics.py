"""I/O statistics, as kvikio.statistics: :class:`SummaryMonitor` and the :class:`Summary` it reads.

The counting is libkvik's (``kvik_monitor_*`` in kvik.h): every public read and write of the
process is one operation, counted when it completes. This module turns a reading into kvikio's
``Summary``: the derived numbers, intervals, JSON, bytes and the report.
"""

import json
import struct
from dataclasses import dataclass, field, fields
from typing import ClassVar, TypedDict

from . import _lib

__all__ = ["Summary", "SummaryMonitor"]

# What a reading carries besides the fields: the span it belongs to (0 for an interval, which
# belongs to none), its ends on the monotonic clock, and the anchor that maps them to Unix time.
_RAW = ("span", "start_ns", "end_ns", "anchor_unix_ns", "anchor_mono_ns")
# The counts of a reading, which an interval takes the differences of.
_COUNTS = (
    "num_ops",
    "num_reads",
    "num_writes",
    "bytes_requested",
    "bytes_transferred",
    "bytes_read",
    "bytes_written",
    "num_errors",
    "busy_ns",
    "total_duration_ns",
)
_BACKEND_COUNTS = ("num_ops", "bytes_transferred", "total_duration_ns", "num_errors")
_BACKENDS = ("Posix", "Gds", "Mmap", "RemoteHttp", "RemoteHdfs")  # kvik_io_backend_name()

# serialize(): a magic number, a version, then every number of the reading as a signed 64-bit
# little-endian integer (the unsigned counts stay far below 2**63).
_MAGIC = b"KVSM"
_VERSION = 1
_LAYOUT = struct.Struct(
    "<4sI" + "q" * (len(_RAW) + len(_COUNTS) + len(_BACKENDS) * len(_BACKEND_COUNTS))
)


def _scaled(value, units, step):
    """`value` in the largest unit of `units` it reaches, with two decimals."""
    unit = units[0]
    for bigger in units[1:]:
        if abs(value) < step:
            break
        value /= step
        unit = bigger
    return f"{value:.2f} {unit}" if unit != units[0] else f"{value:g} {unit}"


def _nbytes(n):
    return _scaled(n, ("B", "KiB", "MiB", "GiB", "TiB"), 1024)


def _duration(ns):
    for unit, size in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= size:
            return f"{ns / size:.2f} {unit}"
    return f"{ns} ns"


def _rate(bytes_per_sec):
    return _nbytes(bytes_per_sec) + "/s"


@dataclass(frozen=True)
class Summary:
    """Totals of the I/O the process performed while a :class:`SummaryMonitor` watched

    A snapshot from :meth:`SummaryMonitor.get` or :meth:`SummaryMonitor.since`; do not construct
    it directly. Every operation is one user-facing call (one ``read()``, however many system
    calls it took). Fields named ``_ns`` are nanoseconds; the two ``_unix_ns`` timestamps are
    nanoseconds since the Unix epoch (comparable with ``time.time_ns()``), measured on the
    monotonic clock and mapped through the anchor the monitor took when it was created.
    """

    class BackendTotals(TypedDict):
        """What one backend carried, a value of :attr:`Summary.by_backend`"""

        num_ops: int
        bytes_transferred: int
        total_duration_ns: int
        num_errors: int

    start_unix_ns: int
    """When counting started, or was last reset (an interval: its earlier reading)"""
    end_unix_ns: int
    """When the summary was read, or when the monitor stopped"""
    num_ops: int
    """Number of user-facing operations that completed"""
    num_reads: int
    num_writes: int
    bytes_requested: int
    """Bytes the operations asked for"""
    bytes_transferred: int
    """Bytes actually moved: less than requested on a short read or a failed operation"""
    bytes_read: int
    bytes_written: int
    num_errors: int
    """Number of operations that failed"""
    busy_ns: int
    """Time during which at least one operation was in flight, never above :attr:`wall_ns`"""
    total_duration_ns: int
    """The operations' durations added up, overlapping ones each counted"""
    by_backend: dict = field(hash=False)
    """What each backend carried, by kvikio's backend names; the parts add up to the totals"""
    counters: dict = field(hash=False)
    """Work that belongs to no single operation: kvik counts none, so this is empty"""
    wall_ns: int
    """The span this summary covers, from start to end"""
    busy_bytes_per_sec: float
    """Bytes transferred per second of busy time, or zero if no time was spent busy"""
    busy_fraction: float
    """The part of the span during which an operation was in flight, between 0 and 1"""
    mean_duration_ns: int
    """Average duration of one operation, or zero if none completed"""

    # The reading's span, monotonic ends and anchor (_RAW), set by _make; not a field, so that
    # equality and the hash look only at what kvikio's fields say.
    _raw: ClassVar[dict] = {}

    @classmethod
    def _make(cls, raw, counts, by_backend):
        anchor = raw["anchor_unix_ns"] - raw["anchor_mono_ns"]
        wall = max(raw["end_ns"] - raw["start_ns"], 0)
        busy, ops = counts["busy_ns"], counts["num_ops"]
        ret = cls(
            start_unix_ns=anchor + raw["start_ns"],
            end_unix_ns=anchor + raw["end_ns"],
            by_backend={name: dict(by_backend[name]) for name in _BACKENDS},
            counters={},
            wall_ns=wall,
            busy_bytes_per_sec=counts["bytes_transferred"] * 1e9 / busy if busy else 0.0,
            busy_fraction=busy / wall if wall else 0.0,
            mean_duration_ns=counts["total_duration_ns"] // ops if ops else 0,
            **counts,
        )
        object.__setattr__(ret, "_raw", {k: raw[k] for k in _RAW})
        return ret

    @classmethod
    def _from_reading(cls, reading):
        counts = {k: reading[k] for k in _COUNTS}
        return cls._make(reading, counts, reading["by_backend"])

    def since(self, previous: "Summary") -> "Summary":
        """Totals for the interval between an earlier reading and this one

        Parameters
        ----------
        previous
            An earlier reading of the same span.

        Returns
        -------
        The interval's totals, spanning from ``previous.end_unix_ns`` to ``end_unix_ns``.

        Raises
        ------
        ValueError
            If ``previous`` is not an earlier reading of the same span: an interval, a reading
            of another monitor, or one from before a reset.
        """
        mine, theirs = self._raw, getattr(previous, "_raw", {})
        if not (
            isinstance(previous, Summary)
            and mine["span"] != 0
            and theirs.get("span") == mine["span"]
            and theirs.get("start_ns") == mine["start_ns"]
            and theirs.get("end_ns", mine["end_ns"] + 1) <= mine["end_ns"]
        ):
            raise ValueError(
                "`previous` must be an earlier reading of the same span, from get() rather than "
                "since(), of the same monitor and since its last reset"
            )
        raw = dict(mine, span=0, start_ns=theirs["end_ns"])
        counts = {k: getattr(self, k) - getattr(previous, k) for k in _COUNTS}
        by_backend = {
            name: {
                k: self.by_backend[name][k] - previous.by_backend[name][k]
                for k in _BACKEND_COUNTS
            }
            for name in _BACKENDS
        }
        return Summary._make(raw, counts, by_backend)

    def _as_dict(self):
        """kvikio's JSON object: the fields, the counters and the backends last."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        first = ("start_unix_ns", "end_unix_ns", "wall_ns")
        last = ("counters", "by_backend")
        order = first + tuple(k for k in d if k not in first + last) + last
        return {k: d[k] for k in order}

    def to_json(self) -> str:
        """Serialize to JSON, with the timestamps against the wall clock

        Returns
        -------
        A JSON object.
        """
        return json.dumps(self._as_dict())

    def serialize(self) -> bytes:
        """Serialize to bytes, exactly, anchor included

        A summary that has been through the bytes is still a valid ``previous`` for
        :meth:`SummaryMonitor.since`. Pickling uses this.

        Returns
        -------
        A fixed-size buffer, which only this version of kvik reads back.
        """
        numbers = [self._raw[k] for k in _RAW] + [getattr(self, k) for k in _COUNTS]
        for name in _BACKENDS:
            numbers += [self.by_backend[name][k] for k in _BACKEND_COUNTS]
        return _LAYOUT.pack(_MAGIC, _VERSION, *numbers)

    @staticmethod
    def deserialize(data: bytes) -> "Summary":
        """Rebuild a summary from :meth:`serialize`

        Raises
        ------
        ValueError
            If the bytes are not a summary, are truncated, or carry a version this build does
            not know.
        """
        data = bytes(data)
        if len(data) != _LAYOUT.size:
            raise ValueError(
                f"not a serialized Summary: {len(data)} bytes, where one is {_LAYOUT.size}"
            )
        magic, version, *numbers = _LAYOUT.unpack(data)
        if magic != _MAGIC:
            raise ValueError("not a serialized Summary: wrong magic number")
        if version != _VERSION:
            raise ValueError(
                f"serialized Summary of version {version}, where this kvik reads {_VERSION}"
            )
        raw = dict(zip(_RAW, numbers))
        counts = dict(zip(_COUNTS, numbers[len(_RAW) :]))
        rest = numbers[len(_RAW) + len(_COUNTS) :]
        n = len(_BACKEND_COUNTS)
        by_backend = {
            name: dict(zip(_BACKEND_COUNTS, rest[i * n : (i + 1) * n]))
            for i, name in enumerate(_BACKENDS)
        }
        return Summary._make(raw, counts, by_backend)

    def __reduce__(self):
        return (Summary.deserialize, (self.serialize(),))

    def report(self, all_rows: bool = False) -> str:
        """Format a human-readable report, one field per line, newline-terminated

        Parameters
        ----------
        all_rows
            Print every backend, including those the run never used.
        """
        rows = [
            ("wall time", _duration(self.wall_ns)),
            (
                "busy time",
                f"{_duration(self.busy_ns)} ({self.busy_fraction * 100:.2f} % of the wall time)",
            ),
            ("busy bandwidth", _rate(self.busy_bytes_per_sec)),
            ("operations", f"{self.num_ops} ({self.num_reads} read, {self.num_writes} write)"),
            ("mean duration", _duration(self.mean_duration_ns)),
            (
                "bytes",
                f"{_nbytes(self.bytes_transferred)} of {_nbytes(self.bytes_requested)} "
                f"requested ({_nbytes(self.bytes_read)} read, "
                f"{_nbytes(self.bytes_written)} written)",
            ),
            ("errors", str(self.num_errors)),
        ]
        for name, t in self.by_backend.items():
            if t["num_ops"] == 0:
                if all_rows:
                    rows.append((f"backend {name}", "unused"))
                continue
            value = (
                f"{_nbytes(t['bytes_transferred'])} in {t['num_ops']} ops, "
                f"{_duration(t['total_duration_ns'])}"
            )
            if t["total_duration_ns"] > 0:
                value += ", " + _rate(t["bytes_transferred"] * 1e9 / t["total_duration_ns"])
            if t["num_errors"]:
                value += f", {t['num_errors']} failed"
            rows.append((f"backend {name}", value))
        return "KvikIO I/O summary\n" + "".join(f"  {k:<21}{v}\n" for k, v in rows)

    def __str__(self) -> str:
        return self.report()


class SummaryMonitor:
    """Counts the process's I/O from its creation until it is stopped

    Every thread's I/O counts, not only the creating thread's. Nothing is counted while no
    monitor exists. Monitors are independent: any number can exist, and resetting one leaves the
    others as they are. Usable as a context manager, which stops it on exit::

        with kvik.SummaryMonitor() as monitor:
            before = monitor.get()
            run_a_phase()
            print(monitor.since(before).busy_bytes_per_sec)
    """

    __slots__ = ("_handle",)

    def __init__(self):
        """Create a monitor and begin counting"""
        self._handle = _lib.Monitor()

    def get(self) -> Summary:
        """Read the totals since creation or the last reset; non-destructive"""
        return Summary._from_reading(self._handle.read())

    def reset(self) -> None:
        """Zero the totals and restart the span, as if the monitor had just been created"""
        self._handle.reset()

    def since(self, previous: Summary) -> Summary:
        """Totals for the interval since an earlier reading of this monitor

        Raises
        ------
        ValueError
            If ``previous`` is not an earlier reading of this monitor's current span.
        """
        return self.get().since(previous)

    def stop(self) -> None:
        """Stop counting, for good; idempotent. The span ends here."""
        self._handle.stop()

    def __enter__(self) -> "SummaryMonitor":
        return self

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        self.stop()
