"""One file, or a list of files, read split across devices: each device reads its own part."""
import math
import os

from . import _frameworks as frameworks
from ._lib import CuFile

# The default boundary of the parts of one file: a page, so that each part's read starts on one
# (O_DIRECT and cuFile read whole pages; a part that starts mid-page shares a page with another).
PAGE = 4096


def _dtype(dtype):
    """(safetensors code, item size) of `dtype`: None (bytes), a name ("float32"), a NumPy dtype
    or type, or a torch.dtype. The code is how each framework adapter names it."""
    if dtype is None:
        return "U8", 1
    if type(dtype).__module__ == "torch" and type(dtype).__name__ == "dtype":
        name = str(dtype).rpartition(".")[2]
    elif isinstance(dtype, str) and dtype in frameworks.CODE_OF_NAME:
        name = dtype  # "bfloat16" and the fp8 names, which NumPy knows only with ml_dtypes
    else:
        import numpy

        try:
            dtype = numpy.dtype(dtype)
        except TypeError as e:
            raise TypeError(f"kvik.read_split: {dtype!r} is not a dtype: {e}") from None
        if dtype.byteorder not in "=|":
            raise TypeError(f"kvik.read_split: dtype {dtype.str} is not in this machine's byte "
                            "order, which the arrays are in")
        name = dtype.name
    code = frameworks.CODE_OF_NAME.get(name)
    if code is None or code in frameworks.PACKED:
        raise TypeError(f"kvik.read_split: no dtype {name}; it reads into those of safetensors "
                        "(bool, integers, float16 to 64, bfloat16, fp8 and complex64)")
    return code, frameworks.DTYPES[code][0] // 8


def _device_list(devices):
    """The canonical names ("cpu", "cuda:N") of a non-empty sequence of devices."""
    if isinstance(devices, (str, int)) or not hasattr(devices, "__iter__"):
        raise TypeError("kvik.read_split: devices must be a list of devices, not "
                        f"{type(devices).__name__}")
    names = [frameworks.device_name(device) for device in devices]
    if not names:
        raise ValueError("kvik.read_split: no devices to read into")
    return names


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _part_bounds(size, parts, unit):
    """parts + 1 offsets that cut `size` bytes into contiguous parts on multiples of `unit` (the
    last part ends at `size`): as equal as whole units allow, the first parts one unit larger."""
    units = -(-size // unit)
    each, more = divmod(units, parts)
    return [min(size, (i * each + min(i, more)) * unit) for i in range(parts + 1)]


def _parts_of_one(path, size, names, unit):
    """[(path, file offset, nbytes, device name)]: the file cut on multiples of `unit`, part i
    for names[i]."""
    bounds = _part_bounds(size, len(names), unit)
    return [(path, bounds[i], bounds[i + 1] - bounds[i], name) for i, name in enumerate(names)]


def _balance(sizes, slots):
    """The slot of each size: the largest first, each to the least loaded slot (the first of
    equals), so that the slots' totals are near equal."""
    loads, where = [0] * slots, [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        where[i] = min(range(slots), key=lambda s: loads[s])
        loads[where[i]] += sizes[i]
    return where


def _mapped(paths, device_map):
    """The device of each path by the caller's {path: device}; every path covered, no key left."""
    if not hasattr(device_map, "items"):
        raise TypeError(f"kvik.read_split: device_map must be a dict, not "
                        f"{type(device_map).__name__}")
    where = {os.fsdecode(path): device for path, device in device_map.items()}
    missing = [path for path in paths if path not in where]
    if missing:
        raise ValueError(f"kvik.read_split: {missing[0]} is not in device_map")
    extra = sorted(set(where) - set(paths))
    if extra:
        raise ValueError(f"kvik.read_split: device_map names {extra[0]}, which is not in paths")
    return [where[path] for path in paths]


def _devices_of(one, paths, devices, device_map):
    """The device names read_split reads into: one per part of one file, or one per file (from
    device_map), or the devices a list of files is balanced over."""
    if device_map is None:
        if devices is None:
            raise ValueError("kvik.read_split: give devices, or device_map for a list of files")
        return _device_list(devices)
    if one:
        raise ValueError("kvik.read_split: device_map places whole files: give a list of paths, "
                         "or devices to split one file")
    if devices is not None:
        raise ValueError("kvik.read_split: give devices or device_map, not both")
    return [frameworks.device_name(device) for device in _mapped(paths, device_map)]


def _read(files, reads):
    """Start every read before waiting for any; ValueError naming the file for a short one.
    reads: [(path, file offset, nbytes, framework adapter, buffer)]."""
    started = []
    try:
        for path, offset, nbytes, fw, buf in reads:
            if nbytes:
                future = files[path].pread(fw.region(buf, 0, nbytes), nbytes, offset)
                started.append((future, path, offset, nbytes))
        for future, path, offset, nbytes in started:
            got = future.get()
            if got != nbytes:
                raise ValueError(f"{path}: short read, {got} of {nbytes} bytes at {offset}: the "
                                 "file shrank while it was read")
    finally:
        # On an error, each request still running is waited for as its future goes (the future
        # holds its buffer), before the files close.
        started.clear()


def read_split(paths, devices=None, framework="pt", *, dtype=None, align=PAGE, device_map=None):
    """Read one file split across devices, or a list of files spread over them: each device reads
    its own part straight into its own memory.

    `paths` is one file (a str, bytes or os.PathLike) or a list of them. `devices` is a list of
    devices, each "cpu", "cuda", "cuda:N", an int N or a torch.device; a device may come more
    than once. `framework` allocates the memory: "pt" (torch.empty, the default), "cupy"
    (cupy.empty, devices only) or "numpy" (numpy.empty, "cpu" only).

    One file: cut into len(devices) contiguous parts, part i read into devices[i]. Returns a list
    of len(devices) 1-D arrays, whose concatenation is the file. The parts are as equal as whole
    multiples of `align` bytes allow (4096 by default; a record size keeps records whole), the
    first ones larger; a part is empty where the file has fewer units than there are devices.

    A list of files: each file whole on one device. Returns a list of 1-D arrays in the order of
    `paths`. Without `device_map`, the files are balanced by bytes: the largest first, each to the
    device that holds the fewest bytes so far. `device_map` ({path: device}, in place of
    `devices`) places each file where the caller says.

    `dtype` (a name such as "float32", a NumPy dtype or a torch.dtype; bytes by default) is the
    arrays' dtype: every file's size must be a multiple of its item size, and the parts of one file
    end on multiples of both the item size and `align`.

    Every part is ONE parallel kvik request (CuFile.pread: kvik picks the path, cuFile or the bounce
    pipeline), and the requests of all devices run at once: the files are opened and the memory
    allocated first, every read started, then each waited for. Raises, returning nothing:
    ValueError or TypeError for a bad device, dtype, align or device_map before any file is read;
    OSError (kvik.FileNotFound, ...) for a file that cannot be opened; ValueError naming the file
    for one that shrank while it was read.
    """
    one = isinstance(paths, (str, bytes, os.PathLike))
    paths = [os.fsdecode(paths)] if one else [os.fsdecode(path) for path in paths]
    names = _devices_of(one, paths, devices, device_map)
    if not _is_count(align):
        raise ValueError(f"kvik.read_split: align must be an int of at least 1, not {align!r}")
    code, item = _dtype(dtype)
    adapters = {name: frameworks.adapter(framework, name, name) for name in dict.fromkeys(names)}
    dtypes = {name: adapters[name].dtype(code) for name in adapters}
    files = {}
    try:
        for path in dict.fromkeys(paths):
            files[path] = CuFile(path, "r")
        sizes = [files[path].nbytes() for path in paths]
        for path, size in zip(paths, sizes):
            if size % item:
                raise ValueError(f"{path}: {size} bytes are not a whole number of {item}-byte "
                                 "items")
        if one:
            parts = _parts_of_one(paths[0], sizes[0], names, math.lcm(align, item))
        else:
            where = names if device_map is not None else [
                names[slot] for slot in _balance(sizes, len(names))]
            parts = [(path, 0, size, name) for path, size, name in zip(paths, sizes, where)]
        bufs = [adapters[name].empty(nbytes) for _, _, nbytes, name in parts]
        _read(files, [(path, offset, nbytes, adapters[name], buf)
                      for (path, offset, nbytes, name), buf in zip(parts, bufs)])
    finally:
        for f in files.values():
            f.close()
    return [adapters[name].view(buf, 0, nbytes, dtypes[name], [nbytes // item])
            for (_, _, nbytes, name), buf in zip(parts, bufs)]
