"""TensorFlow checkpoints ("tensor bundles", as in Google's BERT releases) read and written without TensorFlow.

A checkpoint ``PREFIX`` (e.g. ``uncased_L-12_H-768_A-12/bert_model.ckpt``) is two or more files:

* ``PREFIX.index``: a LevelDB-format SSTable mapping each tensor name to a ``BundleEntryProto`` (dtype, shape, which
  data shard, offset, size, masked CRC-32C of the bytes); the empty key holds a ``BundleHeaderProto`` (number of
  shards, endianness, format version). Blocks are prefix-compressed entries with restart points, each followed by a
  5-byte trailer (compression type, masked CRC-32C); the 48-byte footer holds the metaindex and index block handles
  and the magic number ``0xdb4775248b80fb57``.
* ``PREFIX.data-SSSSS-of-NNNNN``: the raw little-endian tensor bytes, back to back.

Both protobuf messages are decoded by hand (varints, length-delimited and fixed-width fields), so nothing beyond
numpy is needed. Data files are memory-mapped and every tensor is copied out once. Every problem with the files is a
``ValueError`` naming the file and what is wrong (a missing file is a ``FileNotFoundError``).
"""

from __future__ import annotations

import os
import struct
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from bertkit.io import atomic_write
from bertkit.weights.crc32c import crc32c, mask, unmask

__all__ = ["read_bundle", "write_bundle"]

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48  # two block handles padded to 2 * 20 bytes, then the 8-byte magic number
BLOCK_TRAILER_SIZE = 5  # compression type byte + masked CRC-32C of block contents and type byte
BLOCK_SIZE = 262144  # what TF's table builder uses for bundle indexes
RESTART_INTERVAL = 16
HEADER_KEY = b""
BUNDLE_VERSION = 1  # kTensorBundleVersion: what this code writes and the newest it reads
#: Written by tf.train.Checkpoint (TF2): object-graph metadata, a string tensor that is not a weight.
OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"

# tensorflow/core/framework/types.proto: enum value -> (name, numpy dtype or None when unsupported)
DT_FLOAT, DT_DOUBLE, DT_INT32, DT_UINT8, DT_INT16, DT_INT8, DT_STRING = 1, 2, 3, 4, 5, 6, 7
DT_COMPLEX64, DT_INT64, DT_BOOL, DT_BFLOAT16, DT_UINT16, DT_COMPLEX128, DT_HALF = 8, 9, 10, 14, 17, 18, 19
DT_UINT32, DT_UINT64 = 22, 23
_DTYPES: dict[int, tuple[str, str | None]] = {
    0: ("DT_INVALID", None), DT_FLOAT: ("DT_FLOAT", "<f4"), DT_DOUBLE: ("DT_DOUBLE", "<f8"),
    DT_INT32: ("DT_INT32", "<i4"), DT_UINT8: ("DT_UINT8", "u1"), DT_INT16: ("DT_INT16", "<i2"),
    DT_INT8: ("DT_INT8", "i1"), DT_STRING: ("DT_STRING", None), DT_COMPLEX64: ("DT_COMPLEX64", "<c8"),
    DT_INT64: ("DT_INT64", "<i8"), DT_BOOL: ("DT_BOOL", "?"), 11: ("DT_QINT8", None), 12: ("DT_QUINT8", None),
    13: ("DT_QINT32", None), DT_BFLOAT16: ("DT_BFLOAT16", "<u2"), 15: ("DT_QINT16", None), 16: ("DT_QUINT16", None),
    DT_UINT16: ("DT_UINT16", "<u2"), DT_COMPLEX128: ("DT_COMPLEX128", "<c16"), DT_HALF: ("DT_HALF", "<f2"),
    20: ("DT_RESOURCE", None), 21: ("DT_VARIANT", None), DT_UINT32: ("DT_UINT32", "<u4"),
    DT_UINT64: ("DT_UINT64", "<u8"),
}
_FROM_NUMPY = {("f", 2): DT_HALF, ("f", 4): DT_FLOAT, ("f", 8): DT_DOUBLE, ("i", 1): DT_INT8, ("i", 2): DT_INT16,
               ("i", 4): DT_INT32, ("i", 8): DT_INT64, ("u", 1): DT_UINT8, ("u", 2): DT_UINT16, ("u", 4): DT_UINT32,
               ("u", 8): DT_UINT64, ("b", 1): DT_BOOL, ("c", 8): DT_COMPLEX64, ("c", 16): DT_COMPLEX128}


class _Corrupt(ValueError):
    """A decoding problem; the caller adds which file it is in."""


# --------------------------------------------------------------------------------------------------------------------
# Protobuf wire format, by hand


def _read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise _Corrupt("a varint runs past the end of its record")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise _Corrupt("a varint is longer than 10 bytes")


def _signed64(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


def _proto_fields(buf: bytes, what: str) -> Iterator[tuple[int, int, int | bytes]]:
    """``(field number, wire type, value)`` of every field of a serialized message."""
    pos, end = 0, len(buf)
    while pos < end:
        tag, pos = _read_varint(buf, pos, end)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _read_varint(buf, pos, end)
        elif wire == 1:
            if pos + 8 > end:
                raise _Corrupt(f"a fixed64 field of a {what} runs past its end")
            value, pos = struct.unpack_from("<Q", buf, pos)[0], pos + 8
        elif wire == 2:
            length, pos = _read_varint(buf, pos, end)
            if pos + length > end:
                raise _Corrupt(f"a length-delimited field of a {what} runs past its end")
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 5:
            if pos + 4 > end:
                raise _Corrupt(f"a fixed32 field of a {what} runs past its end")
            value, pos = struct.unpack_from("<I", buf, pos)[0], pos + 4
        else:
            raise _Corrupt(f"a {what} has a field of unsupported wire type {wire}")
        if number == 0:
            raise _Corrupt(f"a {what} has a field numbered 0")
        yield number, wire, value


def _expect(wire: int, wanted: int, what: str, name: str) -> None:
    if wire != wanted:
        raise _Corrupt(f"{what}.{name} has wire type {wire}, expected {wanted}")


def _varint_bytes(v: int) -> bytes:
    if v < 0:
        v += 1 << 64
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _int_field(number: int, v: int) -> bytes:
    return _varint_bytes(number << 3) + _varint_bytes(v) if v else b""  # proto3: defaults are not written


def _message_field(number: int, payload: bytes) -> bytes:
    return _varint_bytes(number << 3 | 2) + _varint_bytes(len(payload)) + payload


# --------------------------------------------------------------------------------------------------------------------
# The two bundle messages (tensorflow/core/protobuf/tensor_bundle.proto)


@dataclass
class _Header:
    num_shards: int = 0
    endianness: int = 0  # 0 LITTLE, 1 BIG
    producer: int = 0
    min_consumer: int = 0
    bad_consumers: list[int] = field(default_factory=list)


@dataclass
class _Entry:
    dtype: int = 0
    shape: tuple[int, ...] = ()
    unknown_rank: bool = False
    shard_id: int = 0
    offset: int = 0
    size: int = 0
    crc32c: int = 0
    num_slices: int = 0


def _parse_header(buf: bytes) -> _Header:
    h = _Header()
    for number, wire, value in _proto_fields(buf, "BundleHeaderProto"):
        if number == 1:
            _expect(wire, 0, "BundleHeaderProto", "num_shards")
            h.num_shards = _signed64(value)
        elif number == 2:
            _expect(wire, 0, "BundleHeaderProto", "endianness")
            h.endianness = value
        elif number == 3:
            _expect(wire, 2, "BundleHeaderProto", "version")
            for n, w, v in _proto_fields(value, "VersionDef"):
                if n == 1 and w == 0:
                    h.producer = _signed64(v)
                elif n == 2 and w == 0:
                    h.min_consumer = _signed64(v)
                elif n == 3 and w == 0:
                    h.bad_consumers.append(_signed64(v))
                elif n == 3 and w == 2:  # packed repeated
                    pos = 0
                    while pos < len(v):
                        c, pos = _read_varint(v, pos, len(v))
                        h.bad_consumers.append(_signed64(c))
    return h


def _parse_shape(buf: bytes) -> tuple[tuple[int, ...], bool]:
    dims: list[int] = []
    unknown_rank = False
    for number, wire, value in _proto_fields(buf, "TensorShapeProto"):
        if number == 2:
            _expect(wire, 2, "TensorShapeProto", "dim")
            size = 0
            for n, w, v in _proto_fields(value, "TensorShapeProto.Dim"):
                if n == 1:
                    _expect(w, 0, "TensorShapeProto.Dim", "size")
                    size = _signed64(v)
            dims.append(size)
        elif number == 3:
            _expect(wire, 0, "TensorShapeProto", "unknown_rank")
            unknown_rank = bool(value)
    return tuple(dims), unknown_rank


def _parse_entry(buf: bytes) -> _Entry:
    e = _Entry()
    for number, wire, value in _proto_fields(buf, "BundleEntryProto"):
        if number == 1:
            _expect(wire, 0, "BundleEntryProto", "dtype")
            e.dtype = value
        elif number == 2:
            _expect(wire, 2, "BundleEntryProto", "shape")
            e.shape, e.unknown_rank = _parse_shape(value)
        elif number == 3:
            _expect(wire, 0, "BundleEntryProto", "shard_id")
            e.shard_id = _signed64(value)
        elif number == 4:
            _expect(wire, 0, "BundleEntryProto", "offset")
            e.offset = _signed64(value)
        elif number == 5:
            _expect(wire, 0, "BundleEntryProto", "size")
            e.size = _signed64(value)
        elif number == 6:
            _expect(wire, 5, "BundleEntryProto", "crc32c")
            e.crc32c = value
        elif number == 7:
            e.num_slices += 1
    return e


def _header_bytes(num_shards: int) -> bytes:
    return _int_field(1, num_shards) + _message_field(3, _int_field(1, BUNDLE_VERSION))  # LITTLE endian is 0


def _entry_bytes(dtype: int, shape: tuple[int, ...], offset: int, size: int, crc: int) -> bytes:
    shape_proto = b"".join(_message_field(2, _int_field(1, d)) for d in shape)
    masked = mask(crc)
    return (_int_field(1, dtype) + _message_field(2, shape_proto) + _int_field(4, offset) + _int_field(5, size)
            + (b"\x35" + struct.pack("<I", masked) if masked else b""))  # 0x35: field 6, fixed32


# --------------------------------------------------------------------------------------------------------------------
# LevelDB table format (what TF's tsl/lib/io/table*.cc read and write)


def _read_block(data: bytes, offset: int, size: int, what: str) -> bytes:
    end = offset + size + BLOCK_TRAILER_SIZE
    if end > len(data) - FOOTER_SIZE:
        raise _Corrupt(f"the {what} at offset {offset} ({size} bytes) runs past the end of the table; the file is "
                       "truncated")
    stored = struct.unpack_from("<I", data, offset + size + 1)[0]
    actual = crc32c(data[offset:offset + size + 1])
    if unmask(stored) != actual:
        raise _Corrupt(f"checksum mismatch in the {what} at offset {offset} (stored {unmask(stored):#010x}, computed "
                       f"{actual:#010x}); the file is corrupt")
    compression = data[offset + size]
    if compression != 0:
        kind = {1: "Snappy", 2: "Zstd"}.get(compression, "an unknown method")
        raise _Corrupt(f"the {what} at offset {offset} is compressed with {kind} (type {compression}); only "
                       "uncompressed tables (type 0, what TensorFlow writes for checkpoints) are supported")
    return data[offset:offset + size]


def _block_entries(block: bytes, what: str) -> Iterator[tuple[bytes, bytes]]:
    if len(block) < 4:
        raise _Corrupt(f"the {what} is {len(block)} bytes, too short to hold its restart count")
    num_restarts = struct.unpack_from("<I", block, len(block) - 4)[0]
    limit = len(block) - 4 - 4 * num_restarts
    if limit < 0:
        raise _Corrupt(f"the {what} claims {num_restarts} restart points, more than its {len(block)} bytes hold")
    key = b""
    pos = 0
    while pos < limit:
        shared, pos = _read_varint(block, pos, limit)
        unshared, pos = _read_varint(block, pos, limit)
        value_length, pos = _read_varint(block, pos, limit)
        if shared > len(key) or pos + unshared + value_length > limit:
            raise _Corrupt(f"a bad entry in the {what} at byte {pos}")
        key = key[:shared] + block[pos:pos + unshared]
        pos += unshared
        yield key, block[pos:pos + value_length]
        pos += value_length


def _decode_handle(buf: bytes, pos: int, end: int) -> tuple[int, int, int]:
    offset, pos = _read_varint(buf, pos, end)
    size, pos = _read_varint(buf, pos, end)
    return offset, size, pos


def _read_table(data: bytes) -> list[tuple[bytes, bytes]]:
    if len(data) < FOOTER_SIZE:
        raise _Corrupt(f"it is {len(data)} bytes, shorter than a table footer ({FOOTER_SIZE} bytes); the file is "
                       "truncated or not a checkpoint index")
    footer = len(data) - FOOTER_SIZE
    magic = struct.unpack_from("<Q", data, footer + 40)[0]
    if magic != TABLE_MAGIC:
        raise _Corrupt(f"bad magic number {magic:#018x} (expected {TABLE_MAGIC:#018x}): the file is truncated or "
                       "not a TensorFlow checkpoint index")
    _, _, pos = _decode_handle(data, footer, footer + 40)  # metaindex: TF writes it empty, nothing to read
    index_offset, index_size, _ = _decode_handle(data, pos, footer + 40)
    index = _read_block(data, index_offset, index_size, "index block")
    entries: list[tuple[bytes, bytes]] = []
    for last_key, handle in _block_entries(index, "index block"):
        offset, size, _ = _decode_handle(handle, 0, len(handle))
        block = _read_block(data, offset, size, "data block")
        for key, value in _block_entries(block, f"data block at offset {offset}"):
            if entries and key <= entries[-1][0]:
                raise _Corrupt(f"keys out of order ({entries[-1][0]!r} then {key!r})")
            if key > last_key:
                raise _Corrupt(f"key {key!r} is past its block's index key {last_key!r}")
            entries.append((key, value))
    return entries


class _BlockBuilder:
    def __init__(self, restart_interval: int):
        self.restart_interval = restart_interval
        self.buf = bytearray()
        self.restarts = [0]
        self.counter = 0
        self.last_key = b""

    def add(self, key: bytes, value: bytes) -> None:
        shared = 0
        if self.counter < self.restart_interval:
            n = min(len(self.last_key), len(key))
            while shared < n and self.last_key[shared] == key[shared]:
                shared += 1
        else:
            self.restarts.append(len(self.buf))
            self.counter = 0
        self.buf += _varint_bytes(shared) + _varint_bytes(len(key) - shared) + _varint_bytes(len(value))
        self.buf += key[shared:] + value
        self.last_key = key
        self.counter += 1

    def size_estimate(self) -> int:
        return len(self.buf) + 4 * len(self.restarts) + 4

    def finish(self) -> bytes:
        return bytes(self.buf) + struct.pack(f"<{len(self.restarts) + 1}I", *self.restarts, len(self.restarts))


def _shortest_separator(start: bytes, limit: bytes) -> bytes:
    """LevelDB's bytewise FindShortestSeparator: a short key in [start, limit)."""
    n = min(len(start), len(limit))
    i = 0
    while i < n and start[i] == limit[i]:
        i += 1
    if i < n and start[i] < 0xFF and start[i] + 1 < limit[i]:
        return start[:i] + bytes([start[i] + 1])
    return start


def _short_successor(key: bytes) -> bytes:
    """LevelDB's bytewise FindShortSuccessor: a short key >= key."""
    for i, b in enumerate(key):
        if b != 0xFF:
            return key[:i] + bytes([b + 1])
    return key


def _build_table(entries: list[tuple[bytes, bytes]]) -> bytes:
    """A LevelDB table of sorted ``entries`` laid out exactly as TF's (and LevelDB's) TableBuilder does."""
    out = bytearray()

    def write_block(contents: bytes) -> bytes:
        handle = _varint_bytes(len(out)) + _varint_bytes(len(contents))
        out.extend(contents)
        out.append(0)  # no compression
        out.extend(struct.pack("<I", mask(crc32c(contents + b"\x00"))))
        return handle

    data_block = _BlockBuilder(RESTART_INTERVAL)
    index_block = _BlockBuilder(1)
    pending: bytes | None = None
    last_key = b""
    for key, value in entries:
        if pending is not None:
            index_block.add(_shortest_separator(last_key, key), pending)
            pending = None
        data_block.add(key, value)
        last_key = key
        if data_block.size_estimate() >= BLOCK_SIZE:
            pending = write_block(data_block.finish())
            data_block = _BlockBuilder(RESTART_INTERVAL)
    if data_block.buf:
        pending = write_block(data_block.finish())
    metaindex_handle = write_block(_BlockBuilder(RESTART_INTERVAL).finish())
    if pending is not None:
        index_block.add(_short_successor(last_key), pending)
    index_handle = write_block(index_block.finish())
    handles = metaindex_handle + index_handle
    out.extend(handles + bytes(40 - len(handles)) + struct.pack("<Q", TABLE_MAGIC))
    return bytes(out)


# --------------------------------------------------------------------------------------------------------------------
# Public API


def _normalize_prefix(prefix: str | os.PathLike) -> str:
    path = os.fspath(prefix)
    if path.endswith(".index"):
        path = path[:-len(".index")]
    if os.path.isdir(path):
        example = os.path.join(path, "bert_model.ckpt")
        raise FileNotFoundError(f"{path} is a directory; pass the checkpoint prefix inside it, the path without "
                                f"'.index' (e.g. {example}).")
    return path


def _data_path(prefix: str, shard: int, num_shards: int) -> str:
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


def _map(path: str) -> np.ndarray:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} is missing: the checkpoint's index refers to this data shard.")
    if os.path.getsize(path) == 0:
        return np.zeros(0, dtype=np.uint8)
    return np.memmap(path, dtype=np.uint8, mode="r")


def read_bundle(prefix: str | os.PathLike, *, verify: bool = True) -> dict[str, np.ndarray]:
    """Every tensor of the TF checkpoint ``prefix`` (the path without ``.index``; a path ending in ``.index`` works).

    Returns ``{name: array}`` in the checkpoint's (sorted) order; arrays are owned copies, little-endian, C-ordered.
    DT_BFLOAT16 becomes float32 (exactly). With ``verify`` (the default) every tensor's bytes are checked against
    the CRC-32C stored for it. String tensors are skipped (they are never model weights; TF2's object-graph entry
    silently, any other with a warning). Partitioned (sliced) variables, big-endian checkpoints, and other dtypes are
    refused with a ``ValueError``.
    """
    prefix = _normalize_prefix(prefix)
    index_path = prefix + ".index"
    if not os.path.isfile(index_path):
        raise FileNotFoundError(f"{index_path} is missing: expected a TensorFlow checkpoint prefix such as "
                                ".../bert_model.ckpt (the path without .index).")
    with open(index_path, "rb") as f:
        data = f.read()
    try:
        records = _read_table(data)
        if not records or records[0][0] != HEADER_KEY:
            raise _Corrupt("it has no bundle header (the entry with the empty key)")
        header = _parse_header(records[0][1])
        entries = [(key, _parse_entry(value)) for key, value in records[1:]]
    except _Corrupt as e:
        raise ValueError(f"{index_path} is not a readable TensorFlow checkpoint index: {e}.") from None

    if header.endianness != 0:
        raise ValueError(f"{index_path} is a big-endian checkpoint; only little-endian ones are supported.")
    if header.min_consumer > BUNDLE_VERSION or BUNDLE_VERSION in header.bad_consumers:
        raise ValueError(f"{index_path} needs a newer checkpoint reader (bundle format version "
                         f"{header.producer}, readers from version {header.min_consumer}); this one reads version "
                         f"{BUNDLE_VERSION}.")
    if header.num_shards < 1:
        raise ValueError(f"{index_path} has a bad header: num_shards is {header.num_shards}.")
    sliced = [key for key, entry in entries if entry.num_slices]
    if sliced:
        names = ", ".join(repr(k.decode("utf-8", "replace")) for k in sliced)
        raise ValueError(f"{index_path} holds partitioned (sliced) variables ({names}), saved by a partitioner in "
                         "pieces; reading them is not supported. Re-save the checkpoint without partitioning.")

    shards: dict[int, np.ndarray] = {}
    tensors: dict[str, np.ndarray] = {}
    for key, entry in entries:
        try:
            name = key.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{index_path} has a tensor name that is not UTF-8: {key!r}.") from None
        dtype_name, np_dtype = _DTYPES.get(entry.dtype % 100, (f"enum value {entry.dtype}", None))  # % 100: *_REF
        if entry.dtype % 100 == DT_STRING:
            if name != OBJECT_GRAPH_KEY:
                warnings.warn(f"{index_path}: skipped tensor {name!r} of dtype DT_STRING (strings are not weights "
                              "and are not decoded).", stacklevel=2)
            continue
        if np_dtype is None:
            raise ValueError(f"{index_path}: tensor {name!r} has dtype {dtype_name}, which is not supported.")
        if entry.unknown_rank or any(d < 0 for d in entry.shape):
            raise ValueError(f"{index_path}: tensor {name!r} has an unknown shape {entry.shape}.")
        itemsize = np.dtype(np_dtype).itemsize
        count = int(np.prod(entry.shape, dtype=np.int64))
        if entry.size != count * itemsize:
            raise ValueError(f"{index_path}: tensor {name!r} ({dtype_name}, shape {list(entry.shape)}) should take "
                             f"{count * itemsize} bytes but its entry says {entry.size}; the index is corrupt.")
        if not 0 <= entry.shard_id < header.num_shards:
            raise ValueError(f"{index_path}: tensor {name!r} is in shard {entry.shard_id}, but the checkpoint has "
                             f"{header.num_shards} shard(s); the index is corrupt.")
        data_path = _data_path(prefix, entry.shard_id, header.num_shards)
        if entry.shard_id not in shards:
            shards[entry.shard_id] = _map(data_path)
        shard = shards[entry.shard_id]
        if entry.offset < 0 or entry.offset + entry.size > len(shard):
            raise ValueError(f"{data_path} is truncated or corrupt: tensor {name!r} needs bytes "
                             f"[{entry.offset}, {entry.offset + entry.size}) but the file has {len(shard)} bytes.")
        raw = np.array(shard[entry.offset:entry.offset + entry.size])  # the one copy out of the memory map
        if verify:
            actual = crc32c(raw)
            if actual != unmask(entry.crc32c):
                raise ValueError(f"{data_path}: checksum mismatch for tensor {name!r} (stored "
                                 f"{unmask(entry.crc32c):#010x}, computed {actual:#010x}); the file is corrupt. "
                                 "Pass verify=False to read it anyway.")
        array = raw.view(np_dtype)
        if entry.dtype % 100 == DT_BFLOAT16:
            array = (array.astype(np.uint32) << 16).view(np.float32)
        elif not array.dtype.isnative:
            array = array.astype(array.dtype.newbyteorder("="))
        tensors[name] = array.reshape(entry.shape)
    shards.clear()
    return tensors


def _tf_dtype(name: str, array: np.ndarray) -> int:
    if array.dtype.name == "bfloat16" and array.dtype.itemsize == 2:  # ml_dtypes.bfloat16, if the caller has it
        return DT_BFLOAT16
    dtype = _FROM_NUMPY.get((array.dtype.kind, array.dtype.itemsize))
    if dtype is None:
        raise ValueError(f"tensor {name!r} has dtype {array.dtype}, which a TF checkpoint cannot hold here "
                         "(supported: float16/32/64, bfloat16, int8/16/32/64, uint8/16/32/64, bool, complex64/128).")
    return dtype


def write_bundle(prefix: str | os.PathLike, tensors: Mapping[str, np.ndarray]) -> None:
    """Write ``tensors`` as a single-shard TF checkpoint ``prefix.index`` + ``prefix.data-00000-of-00001``.

    TensorFlow reads the result (``tf.train.load_checkpoint``, ``Saver.restore``); for the same tensors the files are
    byte for byte what TF's own writer produces. Each file is written atomically (temp file, then rename), the data
    file first.
    """
    prefix = _normalize_prefix(prefix)
    prepared = []
    for name, value in tensors.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"tensor names must be non-empty strings, got {name!r}.")
        array = np.asarray(value)
        dtype = _tf_dtype(name, array)
        if array.dtype != array.dtype.newbyteorder("<"):
            array = array.astype(array.dtype.newbyteorder("<"))
        if not array.flags.c_contiguous:
            array = array.copy(order="C")  # not np.ascontiguousarray: it makes scalars 1-d
        prepared.append((name.encode("utf-8"), dtype, array))
    prepared.sort(key=lambda item: item[0])

    records = [(HEADER_KEY, _header_bytes(1))]
    offset = 0
    for key, dtype, array in prepared:
        raw = array.reshape(-1).view(np.uint8)
        records.append((key, _entry_bytes(dtype, array.shape, offset, raw.size, crc32c(raw))))
        offset += raw.size

    def write_data(tmp: str) -> None:
        with open(tmp, "wb") as f:
            for _, _, array in prepared:
                f.write(array.reshape(-1).view(np.uint8))

    def write_index(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(_build_table(records))

    atomic_write(_data_path(prefix, 0, 1), write_data)
    atomic_write(prefix + ".index", write_index)
