"""kvikio 26.10's I/O statistics (issue 26): kvik.SummaryMonitor and kvik.Summary, counted in
libkvik. Each test states one behaviour kvikio code relies on."""
import copy
import json
import pickle
import time

import numpy as np
import pytest

import kvik
from kvik.utils import LocalHttpServer

NBYTES = 1 << 20
BACKENDS = {"Posix", "Gds", "Mmap", "RemoteHttp", "RemoteHdfs"}


@pytest.fixture
def a_file(tmp_path):
    path = tmp_path / "data"
    np.arange(NBYTES // 8, dtype="u8").tofile(path)
    return path


def read_once(path):
    buf = np.empty(NBYTES // 8, dtype="u8")
    with kvik.CuFile(path, "r") as f:
        assert f.read(buf) == NBYTES


def test_names_as_kvikio_has_them():
    assert kvik.Summary is kvik.statistics.Summary
    assert kvik.SummaryMonitor is kvik.statistics.SummaryMonitor
    assert {"Summary", "SummaryMonitor"} <= set(kvik.__all__)


def test_nothing_before_the_monitor_counts(a_file):
    read_once(a_file)
    monitor = kvik.SummaryMonitor()
    summary = monitor.get()
    assert summary.num_ops == 0
    assert summary.busy_ns == 0
    assert set(summary.by_backend) == BACKENDS
    assert summary.counters == {}


def test_each_call_is_one_operation_of_its_backend(a_file):
    buf = np.empty(NBYTES // 8, dtype="u8")
    with kvik.SummaryMonitor() as monitor:
        with kvik.CuFile(a_file, "r") as f:
            assert f.pread(buf, task_size=4096).get() == NBYTES  # 256 tasks
            assert f.read(buf, NBYTES, NBYTES - 100) == 100  # past the end: short
        with kvik.Mmap(a_file) as m:
            assert m.read(buf) == NBYTES
    s = monitor.get()
    assert (s.num_ops, s.num_reads, s.num_writes) == (3, 3, 0)
    assert s.bytes_requested == 3 * NBYTES
    assert s.bytes_transferred == s.bytes_read == 2 * NBYTES + 100
    assert s.by_backend["Posix"]["num_ops"] == 2
    assert s.by_backend["Mmap"] == {
        "num_ops": 1,
        "bytes_transferred": NBYTES,
        "total_duration_ns": s.by_backend["Mmap"]["total_duration_ns"],
        "num_errors": 0,
    }
    assert 0 < s.total_duration_ns <= s.busy_ns <= s.wall_ns


def test_a_remote_read_counts_as_remote_http(tmp_path):
    np.arange(NBYTES // 8, dtype="u8").tofile(tmp_path / "data.bin")
    buf = np.empty(NBYTES // 8, dtype="u8")
    with LocalHttpServer(root_path=tmp_path) as server:
        with kvik.RemoteFile.open_http(f"{server.url}/data.bin") as f:
            monitor = kvik.SummaryMonitor()
            assert f.read(buf) == NBYTES
    s = monitor.get()
    assert s.by_backend["RemoteHttp"]["num_ops"] == 1
    assert s.by_backend["RemoteHttp"]["bytes_transferred"] == NBYTES
    assert "backend RemoteHttp" in s.report()


def test_a_refused_call_is_a_failed_operation(a_file):
    monitor = kvik.SummaryMonitor()
    with kvik.CuFile(a_file, "r") as f:
        with pytest.raises(RuntimeError):
            f.write(np.zeros(8, dtype="u8"))
    s = monitor.get()
    assert (s.num_ops, s.num_errors, s.num_writes, s.bytes_transferred) == (1, 1, 1, 0)
    assert s.bytes_requested == 64
    assert s.by_backend["Posix"]["num_errors"] == 1
    assert "1 failed" in s.report()


def test_reset_and_stop_touch_one_monitor_only(a_file):
    a, b = kvik.SummaryMonitor(), kvik.SummaryMonitor()
    read_once(a_file)
    before = a.get()
    a.reset()
    assert a.get().num_ops == 0
    assert a.get().start_unix_ns > before.start_unix_ns
    assert b.get().num_ops == 1
    b.stop()
    stopped = b.get()
    read_once(a_file)
    assert a.get().num_ops == 1
    assert b.get() == stopped  # the span ended at the stop


def test_since_refuses_what_is_not_an_earlier_reading_of_the_span(a_file):
    monitor, other = kvik.SummaryMonitor(), kvik.SummaryMonitor()
    first = monitor.get()
    read_once(a_file)
    second = monitor.get()
    interval = second.since(first)
    assert interval.num_ops == 1
    assert interval.start_unix_ns == first.end_unix_ns
    with pytest.raises(ValueError):
        second.since(interval)  # an interval
    with pytest.raises(ValueError):
        second.since(other.get())  # another monitor
    with pytest.raises(ValueError):
        first.since(second)  # a later reading
    monitor.reset()
    with pytest.raises(ValueError):
        monitor.since(second)  # from before the reset


def test_bytes_pickle_and_json(a_file):
    monitor = kvik.SummaryMonitor()
    read_once(a_file)
    s = monitor.get()
    raw = s.serialize()
    assert kvik.Summary.deserialize(raw) == s
    assert kvik.Summary.deserialize(bytearray(raw)).to_json() == s.to_json()
    assert pickle.loads(pickle.dumps(s)) == s
    assert copy.deepcopy(s) == s
    assert hash(copy.deepcopy(s)) == hash(s)
    for bad in (raw[:-1], raw + b"\0", b"XXXX" + raw[4:], raw[:4] + b"\x63" + raw[5:]):
        with pytest.raises(ValueError):
            kvik.Summary.deserialize(bad)
    parsed = json.loads(s.to_json())
    assert abs(time.time_ns() - parsed["end_unix_ns"]) < 60e9
    assert set(parsed["by_backend"]) == BACKENDS
    assert parsed["mean_duration_ns"] == s.total_duration_ns


def test_report(a_file):
    monitor = kvik.SummaryMonitor()
    read_once(a_file)
    s = monitor.get()
    text = str(s)
    assert text.startswith("KvikIO I/O summary\n") and text.endswith("\n")
    assert "1.00 MiB of 1.00 MiB requested" in text
    assert "backend Posix" in text and "backend Gds" not in text
    assert "  backend Gds" in s.report(all_rows=True)
