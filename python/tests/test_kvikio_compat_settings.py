"""kvikio 26.10's settings, as `import kvik as kvikio` must honour them (issue 26, "Settings").

One test per behaviour; each test's name and docstring state it."""
import pytest

import kvik as kvikio
from kvik import _lib, cufile_driver, defaults

# The counts and sizes of kvikio.defaults: 0 is refused where kvikio needs at least 1.
POSITIVE = ("num_threads", "task_size", "bounce_buffer_size", "http_max_attempts", "http_timeout")
# Those that kvikio converts to an unsigned C type (http_timeout is a C long there).
UNSIGNED = ("num_threads", "task_size", "gds_threshold", "bounce_buffer_size", "http_max_attempts")


@pytest.fixture(autouse=True)
def restore_settings():
    """Every test leaves the settings as it found them."""
    names = POSITIVE + UNSIGNED
    before = {name: defaults.get(name) for name in names}
    yield
    defaults.set(before)


@pytest.mark.parametrize("size", [3, 1024, 4097, 1 << 20])
def test_bounce_buffer_size_accepts_any_positive_value_and_reads_back_as_set(size):
    """kvikio takes any positive bounce buffer size; kvik rounds its buffers up internally."""
    kvikio.defaults.set("bounce_buffer_size", size)
    assert kvikio.defaults.get("bounce_buffer_size") == size
    assert kvikio.defaults.bounce_buffer_size() == size
    with kvikio.defaults.set_bounce_buffer_size(size + 1):
        assert kvikio.defaults.bounce_buffer_size() == size + 1
    assert kvikio.defaults.bounce_buffer_size() == size


@pytest.mark.parametrize("size", [3, 1024])
@pytest.mark.parametrize("direct", [False, True])
def test_io_through_tiny_bounce_buffers_is_byte_exact(tmp_path, size, direct):
    """Reads and writes with a bounce buffer of a few bytes, O_DIRECT on or off, move every byte."""
    data = bytes(range(256)) * 97 + b"tail"
    path = tmp_path / "f"
    with kvikio.defaults.set({"bounce_buffer_size": size, "auto_direct_io_read": direct,
                              "auto_direct_io_write": direct, "task_size": 8192}):
        src = bytearray(len(data) + 1)
        src[1:] = data
        with kvikio.CuFile(path, "w") as f:
            assert f.write(memoryview(src)[1:]) == len(data)
        dst = bytearray(len(data) + 1)
        with kvikio.CuFile(path, "r") as f:
            assert f.read(memoryview(dst)[1:]) == len(data)
    assert bytes(dst[1:]) == data
    assert path.read_bytes() == data


@pytest.mark.parametrize("attempts", [1001, 100000, 2**32 - 1])
def test_http_max_attempts_has_no_cap_of_1000(attempts):
    """kvikio takes any positive number of attempts (a size_t)."""
    kvikio.defaults.set("http_max_attempts", attempts)
    assert kvikio.defaults.http_max_attempts() == attempts


@pytest.mark.parametrize("name, value", [("num_threads", 1025), ("task_size", 1 << 41),
                                         ("gds_threshold", 1 << 62),
                                         ("bounce_buffer_size", 1 << 41)])
def test_no_arbitrary_caps_on_sizes_and_counts(name, value):
    """Sizes and counts go as far as kvikio's C types (or kvik's int64_t) hold: no smaller caps.
    (num_threads 1025 is set inside a block that puts the old count back.)"""
    with kvikio.defaults.set(name, value):
        assert kvikio.defaults.get(name) == value


@pytest.mark.parametrize("name", POSITIVE)
def test_zero_count_or_size_raises_value_error_positive_integer(name):
    """kvikio raises ValueError, "... must be a positive integer", for 0 where it needs 1 or
    more."""
    before = kvikio.defaults.get(name)
    with pytest.raises(ValueError, match="positive integer"):
        kvikio.defaults.set(name, 0)
    with pytest.raises(ValueError, match="positive integer"):
        getattr(kvikio.defaults, f"set_{name}")(0)
    assert kvikio.defaults.get(name) == before


def test_gds_threshold_zero_is_valid():
    """kvikio's gds_threshold is any size_t, 0 included."""
    kvikio.defaults.set("gds_threshold", 0)
    assert kvikio.defaults.gds_threshold() == 0


@pytest.mark.parametrize("name", UNSIGNED)
@pytest.mark.parametrize("value", [-1, -4096])
def test_negative_count_or_size_raises_overflow_error(name, value):
    """kvikio converts these to unsigned C types, which refuse a negative value: OverflowError."""
    before = kvikio.defaults.get(name)
    with pytest.raises(OverflowError, match="negative"):
        kvikio.defaults.set(name, value)
    assert kvikio.defaults.get(name) == before


def test_negative_http_timeout_raises_value_error():
    """kvikio's http_timeout is a C long: a negative one passes the conversion and is refused as
    not positive, a ValueError."""
    with pytest.raises(ValueError, match="positive integer"):
        kvikio.defaults.set("http_timeout", -1)


@pytest.mark.parametrize("name, value", [("num_threads", 2**32), ("task_size", 2**64)])
def test_value_beyond_the_c_type_raises_overflow_error(name, value):
    """kvikio's conversion to unsigned int or size_t refuses a larger value: OverflowError."""
    with pytest.raises(OverflowError, match="too large"):
        kvikio.defaults.set(name, value)


# ---- kvik.cufile_driver: properties read back in the unit they were set in ---------------------


class ConfiguredCuFile:
    """cuFile without nvidia-fs: it accepts the setters and goes on reporting its configured
    values (poll threshold 4 KiB, ...), in bytes as _lib.cufile_properties() gives them."""

    def __init__(self):
        self.sets = []

    def properties(self):
        return {"poll_mode": False, "poll_threshold_size": 4 << 10, "max_direct_io_size": 16 << 20,
                "max_device_cache_size": 128 << 20, "max_device_pinned_mem_size": 32 << 30,
                "per_buffer_cache_size": 1 << 20}

    def install(self, monkeypatch):
        monkeypatch.setattr(cufile_driver, "_assigned", {})
        monkeypatch.setattr(_lib, "cufile_properties", self.properties)
        for name in ("cufile_set_poll_mode", "cufile_set_max_direct_io_size",
                     "cufile_set_max_cache_size", "cufile_set_max_pinned_memory"):
            monkeypatch.setattr(_lib, name, lambda *args, name=name: self.sets.append((name, args)))


@pytest.mark.parametrize("name, value", [("poll_thresh_size", 1024),
                                         ("max_device_cache_size", 4096),
                                         ("max_pinned_memory_size", 1 << 20),
                                         ("max_direct_io_size", 8192), ("poll_mode", True)])
def test_cufile_driver_property_reads_back_in_the_unit_it_was_set_in(monkeypatch, name, value):
    """kvikio remembers what it set: poll_thresh_size set to 1024 (KiB) reads back 1024, not the
    4 that cuFile goes on reporting."""
    driver = ConfiguredCuFile()
    driver.install(monkeypatch)
    before = cufile_driver.get(name)
    with cufile_driver.set(name, value):
        assert cufile_driver.get(name) == value
        assert getattr(cufile_driver.properties, name) == value
    assert cufile_driver.get(name) == before
    setattr(cufile_driver.properties, name, value)
    assert cufile_driver.get(name) == value


def test_cufile_driver_sizes_reach_cufile_in_kib(monkeypatch):
    """A size set in KiB reaches cuFile as that many KiB (kvik's C API takes bytes)."""
    driver = ConfiguredCuFile()
    driver.install(monkeypatch)
    cufile_driver.set("poll_thresh_size", 1024)
    cufile_driver.set("max_device_cache_size", 3)
    assert driver.sets == [("cufile_set_poll_mode", (False, 1024 << 10)),
                           ("cufile_set_max_cache_size", (3 << 10,))]
    cufile_driver.set("poll_mode", True)  # keeps the threshold set before, not cuFile's 4 KiB
    assert driver.sets[-1] == ("cufile_set_poll_mode", (True, 1024 << 10))


def test_cufile_driver_negative_size_raises_overflow_error(monkeypatch):
    """kvikio converts the sizes to size_t: a negative one raises OverflowError."""
    ConfiguredCuFile().install(monkeypatch)
    with pytest.raises(OverflowError, match="negative"):
        cufile_driver.set("poll_thresh_size", -1)
