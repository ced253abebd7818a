"""safetensors files read into and written from host or GPU memory through kvik.

The names are the `safetensors` package's: load_file(), safe_open() and save_file(), for PyTorch
("pt"), CuPy ("cupy") and NumPy ("np") arrays::

    import kvik.safetensors

    weights = kvik.safetensors.load_file("model.safetensors", device="cuda:0")
    model.load_state_dict(weights)

How it reads: the header is parsed and checked here (strict JSON, every range), while a whole
load's reads run, before the others start; ONE allocation per call holds the data of every tensor
asked for, each shard's data goes into it by ONE parallel kvik request (kvik picks its path:
zero-copy from the page cache, the bounce pipeline, O_DIRECT or cuFile), the requests of all
shards run at once, and the tensors are views into the allocation. The allocation comes from the
framework (torch.empty, cupy.empty, numpy.empty), so freeing the tensors gives the memory back to
it. A tensor whose offset in the file is not a multiple of its item size cannot be a view: it
alone is copied to memory of its own. docs/safetensors.md says more.

A path names a file, or a sharded checkpoint: the directory that holds
model.safetensors.index.json, or the index itself ({"metadata": ..., "weight_map": {tensor: shard
file}}, as transformers writes it).

Bad input raises ValueError naming the file and the problem, before any tensor is returned.
"""
import json
import math
import os
import sys

from ._frameworks import ALIGN as _ALIGN
from ._frameworks import CODE_OF_NAME as _CODE_OF_NAME
from ._frameworks import DTYPES as _DTYPES
from ._frameworks import PACKED as _PACKED
from ._frameworks import adapter as _framework
from ._frameworks import device_name as _device_name
from ._frameworks import parse_device as _parse_device
from ._lib import CuFile

__all__ = ["load_file", "safe_open", "save_file"]

INDEX_NAME = "model.safetensors.index.json"
_BIG_ENDIAN = sys.byteorder == "big"

# The safetensors package's limit on the header (MAX_HEADER_SIZE): a longer one is not a header.
_MAX_HEADER = 100_000_000

# save_file orders tensors by dtype as safetensors does: by the order of its Rust enum, which
# DTYPES keeps, the largest first.
_RANK = {code: rank for rank, code in enumerate(_DTYPES)}


# ---- devices ---------------------------------------------------------------------------------


def _placement(names, device_map, device):
    """{device name: [tensor names]} for a device_map of tensor names or module prefixes (as
    accelerate writes them: "model.layers.0" covers "model.layers.0.mlp.weight", "" covers all):
    the longest key that covers a name places it; a name no key covers goes to `device`, or is a
    ValueError where that is None."""
    if not hasattr(device_map, "items"):
        raise TypeError(f"device_map must be a dict, not {type(device_map).__name__}")
    where = {}
    for key, value in device_map.items():
        if not isinstance(key, str):
            raise TypeError(f"device_map key {key!r} is not a str")
        if value == "disk":
            raise ValueError(f"device_map[{key!r}] is 'disk': kvik.safetensors loads into memory")
        where[key] = _device_name(value)
    keys = sorted(where, key=len, reverse=True)
    fallback = None if device is None else _device_name(device)
    groups = {}
    for name in names:
        key = next((k for k in keys if not k or name == k or name.startswith(k + ".")), None)
        if key is None and fallback is None:
            raise ValueError(f"tensor {name!r} is not covered by device_map, and no device was "
                             "given for the rest")
        groups.setdefault(fallback if key is None else where[key], []).append(name)
    return groups


# ---- the header ------------------------------------------------------------------------------


class _Tensor:
    """One entry of a header: its dtype, shape and byte range in the data section."""

    __slots__ = ("name", "dtype", "shape", "begin", "end")

    def __init__(self, name, dtype, shape, begin, end):
        self.name, self.dtype, self.shape, self.begin, self.end = name, dtype, shape, begin, end


def _no_duplicates(pairs):
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        twice = sorted({name for name in names if names.count(name) > 1})
        raise ValueError(f"the header names {', '.join(map(repr, twice))} twice")
    return dict(pairs)


def _no_constant(word):
    raise ValueError(f"the header holds {word}, which is not JSON")


def _json_kind(value):
    """What JSON calls the type of a parsed value, for messages."""
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
             int: "a number", float: "a number"}
    return kinds.get(type(value), "null")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _check_entry(name, entry):
    """The _Tensor an entry describes, or the problem with it as a ValueError's text."""
    if not isinstance(entry, dict):
        raise ValueError(f"tensor {name!r}: its entry is {_json_kind(entry)}, not an object")
    missing = [key for key in ("dtype", "shape", "data_offsets") if key not in entry]
    if missing:
        raise ValueError(f"tensor {name!r}: its entry lacks {', '.join(missing)}")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if dtype not in _DTYPES:
        raise ValueError(f"tensor {name!r}: unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(_is_int(n) and n >= 0 for n in shape):
        raise ValueError(f"tensor {name!r}: shape {shape!r} is not a list of non-negative ints")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_is_int, offsets))
            or not 0 <= offsets[0] <= offsets[1]):
        raise ValueError(f"tensor {name!r}: data_offsets {offsets!r} are not two ints "
                         "0 <= begin <= end")
    bits = _DTYPES[dtype][0] * math.prod(shape)
    if bits % 8 or (dtype in _PACKED and shape and shape[-1] % _PACKED[dtype]):
        raise ValueError(f"tensor {name!r}: shape {shape} of {dtype} is not a whole number of "
                         "bytes")
    if bits // 8 != offsets[1] - offsets[0]:
        raise ValueError(f"tensor {name!r}: shape {shape} of {dtype} is {bits // 8} bytes, but "
                         f"its data_offsets {offsets} hold {offsets[1] - offsets[0]}")
    return _Tensor(name, dtype, shape, offsets[0], offsets[1])


def _check_ranges(tensors, data_size):
    """The ranges must tile the data section: no overlap, no gap, nothing past its end."""
    at, last = 0, None
    for t in sorted(tensors, key=lambda t: (t.begin, t.end)):
        if t.end > data_size:
            raise ValueError(f"tensor {t.name!r}: data_offsets [{t.begin}, {t.end}] run past the "
                             f"data ({data_size} bytes)")
        if t.begin < at:
            raise ValueError(f"tensor {t.name!r}: data_offsets [{t.begin}, {t.end}] overlap "
                             f"tensor {last.name!r} at [{last.begin}, {last.end}]")
        if t.begin > at:
            raise ValueError(f"a gap in the data: bytes [{at}, {t.begin}) belong to no tensor")
        at, last = t.end, t
    if at != data_size:
        raise ValueError(f"a gap in the data: bytes [{at}, {data_size}) belong to no tensor")


class _Shard:
    """One safetensors file: where its data section lies, known from the header's length, and
    once parse() ran, its header read and checked: metadata and tensors (in header order)."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.tensors = None
        fd = os.open(self.path, os.O_RDONLY)
        try:
            self.size = os.fstat(fd).st_size
            try:
                self._raw = self._read_header(fd)
            except ValueError as e:
                raise ValueError(f"{self.path}: {e}") from None
        finally:
            os.close(fd)

    def _read_header(self, fd):
        """The header's bytes; sets data_start and data_size."""
        if self.size < 8:
            raise ValueError(f"truncated: {self.size} bytes, less than the 8-byte header length")
        length = int.from_bytes(os.pread(fd, 8, 0), "little")
        if length > self.size - 8:
            raise ValueError(f"header length {length} is past the end of the file "
                             f"({self.size} bytes): truncated, or not a safetensors file")
        if length > _MAX_HEADER:
            raise ValueError(f"header length {length} is over safetensors' limit of {_MAX_HEADER}")
        raw = os.pread(fd, length, 8)
        if len(raw) != length:
            raise ValueError(f"the header shrank while it was read: {len(raw)} of {length} bytes")
        self.data_start = 8 + length
        self.data_size = self.size - self.data_start
        return raw

    def looks_like_object(self):
        """Whether the header, not yet parsed, is braces around something (safetensors pads it
        with spaces): a file that is not safetensors at all fails that, and is parsed before any
        memory is taken for its data."""
        text = self._raw.strip(b" \t\r\n")
        return text[:1] == b"{" and text[-1:] == b"}"

    def parse(self):
        if self.tensors is None:
            try:
                self._parse()
            except ValueError as e:
                raise ValueError(f"{self.path}: {e}") from None

    def _parse(self):
        try:
            header = json.loads(self._raw.decode("utf-8"), object_pairs_hook=_no_duplicates,
                                parse_constant=_no_constant)
        except UnicodeDecodeError as e:
            raise ValueError(f"the header is not UTF-8: {e}") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"the header is not JSON: {e}") from None
        if not isinstance(header, dict):
            raise ValueError(f"the header is {_json_kind(header)}, not a JSON object")
        metadata = header.pop("__metadata__", None)
        if metadata is not None and not (
                isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
            raise ValueError("__metadata__ is not an object of strings")
        tensors = {name: _check_entry(name, entry) for name, entry in header.items()}
        _check_ranges(tensors.values(), self.data_size)
        self.metadata, self.tensors, self._raw = metadata, tensors, None


def _read_index(path):
    """(metadata, {tensor: shard path}) of a sharded checkpoint's index."""
    try:
        with open(path, "rb") as f:
            index = json.loads(f.read().decode("utf-8"), object_pairs_hook=_no_duplicates,
                               parse_constant=_no_constant)
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: the index is not UTF-8: {e}") from None
    except ValueError as e:
        raise ValueError(f"{path}: the index is not JSON: {e}") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise ValueError(f"{path}: the index has no weight_map of tensor names to shard files")
    base = os.path.dirname(path)
    # Normalised, so that "./shard" and "shard" are one shard, read once.
    return index.get("metadata"), {name: os.path.normpath(os.path.join(base, f))
                                   for name, f in weight_map.items()}


class _Checkpoint:
    """A file or a sharded checkpoint: its shards, in the order of their data, and once parse()
    ran (the constructor runs it, unless told not to), their headers and which shard holds each
    tensor."""

    def __init__(self, path, parse=True):
        path = os.fspath(path)
        if os.path.isdir(path):
            path = os.path.join(path, INDEX_NAME)
            if not os.path.isfile(path):
                raise ValueError(f"{os.path.dirname(path)}: a directory without {INDEX_NAME}")
        self.index, self.where = None, None
        if path.endswith(".index.json"):
            self.index = path
            self.metadata, self._files = _read_index(path)
            by_file = {}
            for name, file in self._files.items():
                if file not in by_file:
                    if not os.path.isfile(file):
                        raise ValueError(f"{path}: shard {os.path.basename(file)!r} (of tensor "
                                         f"{name!r}) does not exist")
                    by_file[file] = _Shard(file)
            self.shards = list(by_file.values())
        else:
            self.shards = [_Shard(path)]
        if parse:
            self.parse()

    def looks_like_object(self):
        return all(shard.looks_like_object() for shard in self.shards)

    def parse(self):
        """Parse and check every shard's header; then where holds."""
        if self.where is not None:
            return
        for shard in self.shards:
            shard.parse()
        if self.index is None:
            shard = self.shards[0]
            self.metadata, self.where = shard.metadata, dict.fromkeys(shard.tensors, shard)
            return
        by_path = {shard.path: shard for shard in self.shards}
        for name, file in self._files.items():
            if name not in by_path[file].tensors:
                raise ValueError(f"{self.index}: tensor {name!r} is not in its shard {file}")
        self.where = {name: by_path[file] for name, file in self._files.items()}

    def keys(self):
        return sorted(self.where)

    def offset_keys(self):
        """The names in the order of their data: shard after shard, in the index's order."""
        shards = {shard: i for i, shard in enumerate(self.shards)}
        return sorted(self.where, key=lambda n: (shards[self.where[n]],
                                                 self.where[n].tensors[n].begin))

    def entry(self, name):
        if name not in self.where:
            raise KeyError(f"no tensor {name!r} in the checkpoint")
        return self.where[name].tensors[name]


# ---- reading ---------------------------------------------------------------------------------


def _ranges(tensors):
    """The byte ranges that hold `tensors` (of one shard), adjacent ones merged, in file order."""
    merged = []
    for t in sorted(tensors, key=lambda t: (t.begin, t.end)):
        if merged and t.begin <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], t.end)
        else:
            merged.append([t.begin, t.end])
    return merged


def _entries(checkpoint, names):
    """[(shard, _Tensor)] of `names`; KeyError for a name not in the checkpoint."""
    return [(checkpoint.where[t.name], t) for t in map(checkpoint.entry, names)]


def _by_shard(fw, entries):
    """{shard: its _Tensors of `entries`, in file order}; the shards in the order of entries. A
    dtype the framework cannot hold is a TypeError here."""
    by_shard = {}
    for shard, t in entries:
        fw.dtype(t.dtype)
        by_shard.setdefault(shard, []).append(t)
    for tensors in by_shard.values():
        tensors.sort(key=lambda t: (t.begin, t.end))
    return by_shard


def _load(checkpoint, names, fw, files=None, direct_io=None):
    """{name: tensor} of `names`, in the order given."""
    return _load_groups([(fw, _entries(checkpoint, names))], files, direct_io)


class _Allocation:
    """One allocation: the spans of the files it holds, (shard, file begin, file end, offset),
    each at an offset congruent to its file offset modulo _ALIGN, one after the other; and
    by_shard, the tensors it holds ({shard: [_Tensor]}, see _by_shard), which the spans cover."""

    def __init__(self, fw, ranges, by_shard=None):
        """ranges: [(shard, file begin, file end)], in the order of by_shard's shards."""
        self.fw, self.by_shard, self.buf = fw, by_shard, None
        self.spans, self.total = [], 0
        for shard, begin, end in ranges:
            self.total += (begin - self.total) % _ALIGN
            self.spans.append((shard, begin, end, self.total))
            self.total += end - begin

    @classmethod
    def of(cls, fw, entries):
        """The allocation of exactly these tensors: their bytes, adjacent ranges in one span."""
        by_shard = _by_shard(fw, entries)  # an unusable dtype fails before any memory or IO
        return cls(fw, [(shard, begin, end) for shard, tensors in by_shard.items()
                        for begin, end in _ranges(tensors)], by_shard)

    def reads(self):
        """(shard, file begin, file end, offset, allocation) of each non-empty span."""
        return [span + (self,) for span in self.spans if span[2] > span[1]]

    def tensors(self, out, later):
        """Put into `out` a view of buf for each tensor, by name; one whose offset its item size
        does not divide (safetensors does not promise aligned offsets) needs a copy of its bytes
        once they are read: (allocation, offset, _Tensor) goes to `later` instead."""
        i, spans = 0, self.spans
        for shard, tensors in self.by_shard.items():
            for t in tensors:
                while not (spans[i][0] is shard and spans[i][1] <= t.begin and
                           t.end <= spans[i][2]):
                    i += 1
                at = spans[i][3] + t.begin - spans[i][1]
                if at % _item_size(t) == 0 or t.end == t.begin:
                    out[t.name] = _view(self.fw, self.buf, at, t)
                else:
                    later.append((self, at, t))


def _copy_misaligned(made, later):
    """Once read, each tensor of `later` (see _Allocation.tensors) in memory of its own."""
    for a, at, t in later:
        made[t.name] = _view(a.fw, a.fw.copy(a.buf, at, at + t.end - t.begin), 0, t)


def _load_groups(groups, files=None, direct_io=None):
    """{name: tensor} of [(framework adapter, [(shard, _Tensor)])]: one allocation per group (per
    device), each shard's part of it read by one request, every request of every group started
    before any is waited for. The names come out in the order given, group after group. `files`:
    the shards' open CuFiles to use and leave open (safe_open's), or None. `direct_io`: what the
    files this opens get for their reads (CuFile.set_direct_io); None leaves them to the setting.
    """
    allocations = [_Allocation.of(fw, entries) for fw, entries in groups]
    for a in allocations:
        a.buf = a.fw.empty(a.total)
    made, later = {}, []

    def views():  # while the reads run: they need no bytes
        for a in allocations:
            a.tensors(made, later)

    _read_all([read for a in allocations for read in a.reads()], files, direct_io, views)
    _copy_misaligned(made, later)
    return {t.name: made[t.name] for _, entries in groups for _, t in entries}


def _load_whole(checkpoint, fw, direct_io):
    """{name: tensor} of every tensor of a checkpoint made with parse=False, in the order of their
    data. Each shard's data section is read whole into one allocation, which needs only the
    headers' lengths, so that the reads start at once; the headers are parsed and checked, and the
    views made, while they run (parsing took 1-2 ms of a 170 ms load of 8.5 GB on an H100). A bad
    header fails once the reads are done, with the same error, never with tensors. Tensors of a
    shard that its index does not name are read too, and not returned."""
    a = _Allocation(fw, [(shard, 0, shard.data_size) for shard in checkpoint.shards])
    try:
        a.buf = fw.empty(a.total)
    except Exception:
        checkpoint.parse()  # a bad header explains more than the allocation's failure
        raise
    made, later, names = {}, [], []

    def parse_and_view():
        checkpoint.parse()
        names.extend(checkpoint.offset_keys())
        a.by_shard = _by_shard(fw, _entries(checkpoint, names))
        a.tensors(made, later)

    _read_all(a.reads(), None, direct_io, parse_and_view)
    _copy_misaligned(made, later)
    return {name: made[name] for name in names}


def _read_all(reads, files, direct_io, meanwhile):
    """Start every read (of every shard, into every allocation), call meanwhile(), then wait for
    each and check it read all it asked. `files` ({shard: CuFile}) keeps the files it opens, open;
    with None they close after."""
    opened, started = {}, []
    files = opened if files is None else files
    try:
        for shard, begin, end, at, a in reads:
            if shard not in files:
                files[shard] = CuFile(shard.path, "r")
                if direct_io is not None:
                    files[shard].set_direct_io(reads=direct_io)
            future = files[shard].pread(a.fw.region(a.buf, at, at + end - begin), end - begin,
                                        shard.data_start + begin)
            started.append((future, shard, begin, end))
        meanwhile()
        for future, shard, begin, end in started:
            got = future.get()
            if got != end - begin:
                raise ValueError(f"{shard.path}: short read, {got} of {end - begin} bytes at "
                                 f"{shard.data_start + begin}: the file shrank while it was read")
    finally:
        # On an error, the futures still running are waited for as they go (each holds its part
        # of buf), before their files close.
        started.clear()
        for f in opened.values():
            f.close()


def _item_size(t):
    return max(1, _DTYPES[t.dtype][0] // 8)


def _view(fw, buf, at, t):
    """Tensor `t` as a view of buf[at:], whose offset its item size divides."""
    shape = list(t.shape)
    if t.dtype in _PACKED and shape:
        shape[-1] //= _PACKED[t.dtype]
    return fw.view(buf, at, at + t.end - t.begin, fw.dtype(t.dtype), shape)


def load_file(path, device=None, framework="pt", *, names=None, device_map=None, direct_io=None):
    """Load the tensors of a safetensors file or sharded checkpoint: {name: tensor}, in file order.

    `device`: "cpu", "cuda", "cuda:N", an int N or a torch.device; None is "cuda:0" for PyTorch
    ("pt", "torch") and CuPy ("cupy"), and "cpu" for NumPy ("np", "numpy"), which holds host memory
    only. `names`: load only these tensors (an iterable of names; KeyError for a name not there);
    only their bytes are read, into an allocation of their size.

    `device_map`: where each tensor goes, as accelerate and transformers write it: {tensor name or
    module prefix: device}, the longest covering key deciding ("model.layers.0" covers
    "model.layers.0.mlp.weight"; "" covers every name). A name no key covers goes to `device`, or
    is a ValueError where `device` is None. Each device gets one allocation, its tensors are read
    straight into it (never through another device), and the reads of all devices run at once.

    `direct_io`: True reads the files with O_DIRECT where their file system allows it (the parts
    the page cache does not hold), False through the page cache, None (the default) as
    defaults' auto_direct_io_read says (off unless set). O_DIRECT loads a checkpoint that is not
    in the page cache faster, but leaves it out of the cache: the next load reads the disk again
    (docs/safetensors.md). For a checkpoint read once, or larger than memory.

    Raises ValueError for a malformed file or checkpoint (the message names the file and the
    problem), TypeError for a dtype the framework cannot hold (bf16 and fp8 in NumPy and CuPy need
    ml_dtypes), OSError for a file that cannot be read.
    """
    default = "cpu" if framework in ("np", "numpy") else "cuda:0"
    checkpoint = _Checkpoint(path, parse=False)
    if names is None and device_map is None and checkpoint.looks_like_object():
        return _load_whole(checkpoint, _framework(framework, device, default), direct_io)
    checkpoint.parse()
    wanted = checkpoint.offset_keys() if names is None else list(names)
    if device_map is None:
        return _load(checkpoint, wanted, _framework(framework, device, default),
                     direct_io=direct_io)
    groups = _placement(wanted, device_map, device)
    return _load_groups([(_framework(framework, dev, default), _entries(checkpoint, group))
                         for dev, group in groups.items()], direct_io=direct_io)


class _Slice:
    """safe_open(...).get_slice(name): the shape and dtype without reading; indexing reads the
    rows the first index selects (an int, or a slice of step 1), or else the whole tensor, and
    gives the part asked for in memory of its own."""

    def __init__(self, handle, name):
        self._handle, self._name = handle, name
        self._shard = handle._checkpoint.where.get(name)
        self._entry = handle._checkpoint.entry(name)

    def get_shape(self):
        return list(self._entry.shape)

    def get_dtype(self):
        return self._entry.dtype

    def _rows(self, first):
        """[begin, end) of the rows `first` selects, or None to read them all."""
        rows = self._entry.shape[0] if self._entry.shape else 0
        if not rows or self._entry.dtype in _PACKED:
            return None
        if _is_int(first) and -rows <= first < rows:
            return first % rows, first % rows + 1
        if isinstance(first, slice) and first.step in (None, 1):
            begin, end, _ = first.indices(rows)
            return begin, max(begin, end)
        return None

    def __getitem__(self, index):
        t = self._entry
        first, rest = (index[0], index[1:]) if isinstance(index, tuple) and index else (index, ())
        rows = self._rows(first)
        if rows is None:
            part = self._handle.get_tensor(self._name)[index]
        else:
            size = (t.end - t.begin) // t.shape[0]
            some = _Tensor(t.name, t.dtype, [rows[1] - rows[0]] + t.shape[1:],
                           t.begin + rows[0] * size, t.begin + rows[1] * size)
            tensor = _load_groups([(self._handle._fw, [(self._shard, some)])],
                                  self._handle._files)[t.name]
            part = tensor[(0 if _is_int(first) else slice(None),) + tuple(rest)]
            if not rest and not _is_int(first):
                return part  # the rows read, in memory of their own already
        return part.clone() if hasattr(part, "clone") else part.copy()


class safe_open:
    """A checkpoint opened for reading tensor by tensor, as safetensors.safe_open::

        with kvik.safetensors.safe_open("model.safetensors", framework="pt", device="cuda:0") as f:
            for name in f.keys():
                tensors[name] = f.get_tensor(name)

    The header (and every shard's, for a sharded checkpoint) is read and checked on opening;
    each shard opens on its first read and stays open until the with block ends.
    """

    def __init__(self, filename, framework, device="cpu"):
        self._fw = _framework(framework, device, "cpu")
        self._checkpoint = _Checkpoint(filename)
        self._files = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for f in self._files.values():
            f.close()
        self._files.clear()
        return False

    def keys(self):
        """The tensor names, sorted."""
        return self._checkpoint.keys()

    def offset_keys(self):
        """The tensor names in the order of their data, shard after shard."""
        return self._checkpoint.offset_keys()

    def metadata(self):
        """The header's __metadata__ (the index's "metadata" for a sharded checkpoint), or None."""
        return self._checkpoint.metadata

    def get_tensor(self, name):
        """Read one tensor (its bytes only)."""
        return _load(self._checkpoint, [name], self._fw, self._files)[name]

    def get_tensors(self):
        return _load(self._checkpoint, self.offset_keys(), self._fw, self._files)

    def get_slice(self, name):
        return _Slice(self, name)


# ---- writing ---------------------------------------------------------------------------------


def _describe(name, tensor):
    """(safetensors dtype, header shape, something kvik writes the bytes from) of one tensor."""
    if type(tensor).__module__.startswith("torch"):
        import torch

        if tensor.layout != torch.strided:
            raise ValueError(f"tensor {name!r} is sparse; safetensors stores dense tensors")
        if not tensor.is_contiguous():
            # As safetensors.torch.save_file: a view of part of a tensor is refused, not copied.
            raise ValueError(f"You are trying to save a non contiguous tensor: `{name}` which is "
                             "not allowed. Call `.contiguous()` on it to pack it before saving.")
        dtype_name = str(tensor.dtype).split(".")[-1]
        flat = tensor.detach().reshape(-1).view(torch.uint8)
        if flat.is_cuda:
            # PyTorch's __cuda_array_interface__ names no stream to wait for: wait here for the
            # kernels that may still be writing the tensor.
            torch.cuda.current_stream(flat.device).synchronize()
        data = flat if flat.is_cuda else flat.numpy()
        shape = list(tensor.shape)
    else:
        if not hasattr(tensor, "dtype") or not hasattr(tensor, "shape"):
            raise ValueError(f"tensor {name!r} is a {type(tensor).__name__}, not an array")
        if hasattr(tensor, "flags") and not tensor.flags.c_contiguous:
            tensor = tensor.copy()  # NumPy and CuPy copy to C order
        if tensor.dtype.byteorder == ">" or (tensor.dtype.byteorder == "=" and _BIG_ENDIAN):
            tensor = tensor.astype(tensor.dtype.newbyteorder("<"))  # as safetensors.numpy swaps
        # As bytes: NumPy gives no buffer of bfloat16 or float8 (ml_dtypes) arrays.
        data = tensor.reshape(-1).view("u1") if hasattr(tensor, "reshape") else tensor
        dtype_name, shape = tensor.dtype.name, list(tensor.shape)
    code = _CODE_OF_NAME.get(dtype_name)
    if code is None:
        raise ValueError(f"tensor {name!r}: safetensors has no dtype for {dtype_name}")
    if code in _PACKED and shape:
        shape[-1] *= _PACKED[code]
    return code, shape, data


def _refuse_shared(tensors):
    """RuntimeError where PyTorch tensors overlap in one storage, as safetensors.torch.save_file:
    the file would hold their bytes twice, and loading would part them."""
    groups = {}
    for name, t in tensors.items():
        if type(t).__module__.startswith("torch") and t.device.type != "meta":
            storage = t.untyped_storage()
            if storage.data_ptr() and storage.nbytes():
                key = (t.device, storage.data_ptr(), storage.nbytes())
                end = t.data_ptr() + t.numel() * t.element_size()
                groups.setdefault(key, []).append((t.data_ptr(), end, name))
    failing = []
    for areas in groups.values():
        areas.sort()
        stop, run = areas[0][1], [areas[0][2]]
        for begin, end, name in areas[1:]:
            if begin < stop:
                run.append(name)
            else:
                failing += [sorted(run)] if len(run) > 1 else []
                run = [name]
            stop = end
        failing += [sorted(run)] if len(run) > 1 else []
    if failing:
        raise RuntimeError(f"Some tensors share memory, this will lead to duplicate memory on "
                           f"disk and potential differences when loading them again: {failing}. "
                           "Save one of each, or clone the others.")


def _header(tensors, metadata):
    """(header bytes, [(begin, end, data)]): the JSON and its padding as safetensors writes them
    (largest dtype first, then by name; compact JSON; spaces up to a multiple of 8 bytes)."""
    if metadata is not None and not (isinstance(metadata, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise ValueError("metadata must be a dict of str to str")
    if not isinstance(tensors, dict) or not all(isinstance(name, str) for name in tensors):
        raise ValueError("tensors must be a dict of names to tensors")
    _refuse_shared(tensors)
    described = sorted(((-_RANK[code], name, code, shape, data) for name, (code, shape, data) in
                        ((n, _describe(n, t)) for n, t in tensors.items())))
    header = {} if metadata is None else {"__metadata__": metadata}
    writes, at = [], 0
    for _, name, code, shape, data in described:
        nbytes = _DTYPES[code][0] * math.prod(shape) // 8
        header[name] = {"dtype": code, "shape": shape, "data_offsets": [at, at + nbytes]}
        writes.append((at, at + nbytes, data))
        at += nbytes
    text = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text, writes


def save_file(tensors, filename, metadata=None):
    """Write `tensors` ({name: tensor}, PyTorch, CuPy or NumPy, on the host or a GPU) to
    `filename` in safetensors format, byte for byte as safetensors.torch.save_file and
    safetensors.numpy.save_file write them. `metadata`: a dict of str to str, or None.

    The header is written from host memory and each tensor's bytes from its own memory (device
    memory through kvik's device write pipeline), all at once. A non-contiguous PyTorch tensor is
    refused with ValueError, and PyTorch tensors that overlap in memory (tied weights) with
    RuntimeError, as safetensors does; NumPy and CuPy arrays are made contiguous.
    """
    head, writes = _header(tensors, metadata)
    with CuFile(os.fspath(filename), "w") as f:
        started = [(f.pwrite(head), len(head))]
        for begin, end, data in writes:
            if end > begin:
                started.append((f.pwrite(data, end - begin, len(head) + begin), end - begin))
        for future, nbytes in started:
            got = future.get()
            if got != nbytes:
                raise OSError(f"{os.fspath(filename)}: short write, {got} of {nbytes} bytes")
