"""CRC-32C (Castagnoli) in numpy, fast enough to check a 1.3 GB checkpoint, plus LevelDB/TF masking.

How it is fast without a C extension: the buffer is cut into ``K`` chunks of ``L`` bytes that are checksummed side by
side, one table-lookup step per byte position vectorised across all ``K`` chunks (so the Python loop runs ``L`` times
per ``K * L`` bytes). A CRC register with initial value 0 is linear over GF(2), so the CRC of ``A || B`` is
``advance(crc(A), len(B)) ^ crc(B)``, where ``advance(c, n)`` (feeding ``n`` zero bytes) is a 32x32 bit matrix applied
as four 256-entry lookup tables, one per byte of ``c``. The chunk CRCs are folded in order pairwise (a vectorised
tree: chunk pairs, then pairs of pairs, ...), and the results of successive blocks are folded into the running CRC.
A tail shorter than a block is zero-padded *at the front* to a whole block: leading zero bytes leave a zero-initial
register at zero, so they change nothing.

The checksum is the standard one (initial value and final xor ``0xFFFFFFFF``): ``crc32c(b"123456789") == 0xE3069283``.
"""

from __future__ import annotations

import functools

import numpy as np

POLY = 0x82F63B78  # reflected Castagnoli polynomial
MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF

#: Chunks checksummed side by side, and bytes per chunk: a block is ``_K * _L`` bytes (4 MiB).
_K = 1 << 17
_L = 1 << 5
#: Below this many bytes a plain Python loop is quicker than setting up the vectorised path.
_SMALL = 128


def _byte_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(POLY), table >> 1).astype(np.uint32)
    return table


_TABLE = _byte_table()
_TABLE_LIST = [int(v) for v in _TABLE]
_BITS = ((np.arange(256)[:, None] >> np.arange(8)[None, :]) & 1).astype(bool)  # [byte value, bit]


def _tables_from_columns(columns: np.ndarray) -> np.ndarray:
    """Four 256-entry tables applying the linear map whose image of bit ``i`` is ``columns[i]``."""
    tables = np.empty((4, 256), dtype=np.uint32)
    for p in range(4):
        picked = np.where(_BITS, columns[None, 8 * p:8 * p + 8], np.uint32(0))
        tables[p] = np.bitwise_xor.reduce(picked, axis=1)
    return tables


def _apply(tables: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The linear map given by ``tables`` applied to every CRC register in ``c`` (uint32)."""
    return (tables[0].take(c & 0xFF) ^ tables[1].take((c >> 8) & 0xFF)
            ^ tables[2].take((c >> 16) & 0xFF) ^ tables[3].take(c >> 24))


@functools.cache
def _advance_tables(k: int) -> np.ndarray:
    """Tables of the map "feed 2**k zero bytes" on a CRC register; built by repeated squaring."""
    if k == 0:
        bits = np.uint32(1) << np.arange(32, dtype=np.uint32)
        columns = _TABLE.take(bits & 0xFF) ^ (bits >> 8)
    else:
        previous = _advance_tables(k - 1)
        columns = _apply(previous, _apply(previous, np.uint32(1) << np.arange(32, dtype=np.uint32)))
    return _tables_from_columns(columns)


@functools.cache
def _advance_lists(k: int) -> tuple[list[int], list[int], list[int], list[int]]:
    t0, t1, t2, t3 = (list(map(int, row)) for row in _advance_tables(k))
    return t0, t1, t2, t3


def _advance(crc: int, n: int) -> int:
    """``crc`` (a register, not the finalised checksum) after ``n`` zero bytes."""
    k = 0
    while n:
        if n & 1:
            t0, t1, t2, t3 = _advance_lists(k)
            crc = t0[crc & 0xFF] ^ t1[(crc >> 8) & 0xFF] ^ t2[(crc >> 16) & 0xFF] ^ t3[crc >> 24]
        n >>= 1
        k += 1
    return crc


def _loop(crc: int, data: np.ndarray) -> int:
    table = _TABLE_LIST
    for b in data.tobytes():
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc


def _block(block: np.ndarray, k_log: int, l_log: int) -> int:
    """Zero-initial CRC register of ``block`` (``2**k_log * 2**l_log`` bytes) via side-by-side chunks."""
    K, L = 1 << k_log, 1 << l_log
    columns = np.ascontiguousarray(block.reshape(K, L).T)  # row j: byte j of every chunk
    crc = np.zeros(K, dtype=np.uint32)
    index = np.empty(K, dtype=np.uint32)
    looked_up = np.empty(K, dtype=np.uint32)
    table = _TABLE
    for j in range(L):
        np.bitwise_xor(crc, columns[j], out=index)
        np.bitwise_and(index, 0xFF, out=index)
        np.take(table, index, out=looked_up, mode="wrap")  # in range; "wrap" skips the slower bounds check
        np.right_shift(crc, 8, out=crc)
        np.bitwise_xor(crc, looked_up, out=crc)
    level = l_log
    while len(crc) > 1:  # fold neighbours in order: crc(A || B) = advance(crc(A), len(B)) ^ crc(B)
        crc = _apply(_advance_tables(level), crc[0::2]) ^ crc[1::2]
        level += 1
    return int(crc[0])


def _tail(data: np.ndarray) -> int:
    """Zero-initial CRC register of a buffer shorter than a block, any length."""
    n = len(data)
    if n <= _SMALL:
        return _loop(0, data)
    # Chunk length about sqrt(n)/4 balances Python-loop steps against array length.
    l_log = min(_L.bit_length() - 1, max(3, (int(n ** 0.5) // 4).bit_length() - 1))
    chunks = -(-n // (1 << l_log))
    k_log = max(0, (chunks - 1).bit_length())
    padded = np.zeros((1 << k_log) << l_log, dtype=np.uint8)
    padded[len(padded) - n:] = data  # leading zeros leave a zero register unchanged
    return _block(padded, k_log, l_log)


def _as_bytes(data: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
    if isinstance(data, np.ndarray):
        array = data if data.flags.c_contiguous else data.copy(order="C")
        return array.reshape(-1).view(np.uint8)
    return np.frombuffer(memoryview(data).cast("B") if isinstance(data, memoryview) else data, dtype=np.uint8)


def crc32c(data: bytes | bytearray | memoryview | np.ndarray) -> int:
    """The CRC-32C of ``data`` (for a numpy array: of its raw bytes in C order)."""
    buf = _as_bytes(data)
    n = len(buf)
    block_size = _K * _L
    k_log, l_log = _K.bit_length() - 1, _L.bit_length() - 1
    crc = _U32
    done = 0
    while n - done >= block_size:
        crc = _advance(crc, block_size) ^ _block(buf[done:done + block_size], k_log, l_log)
        done += block_size
    if done < n:
        crc = _advance(crc, n - done) ^ _tail(buf[done:])
    return crc ^ _U32


def mask(crc: int) -> int:
    """The masked form stored by LevelDB tables and TF tensor bundles (a CRC of data holding CRCs is weak)."""
    crc &= _U32
    return ((((crc >> 15) | (crc << 17)) & _U32) + MASK_DELTA) & _U32


def unmask(masked: int) -> int:
    """Inverse of :func:`mask`."""
    rot = (masked - MASK_DELTA) & _U32
    return ((rot >> 17) | (rot << 15)) & _U32
