"""TF checkpoints (tensor bundles) read and written without TensorFlow, and the numpy CRC-32C behind them.

The fixtures under ``tests/fixtures/tf/`` were written by real TensorFlow (``tests/fixtures/make_tf_checkpoints.py``)
with ``reference.npz`` holding the values TF had in its variables. The last test asks TensorFlow itself to read what
``write_bundle`` wrote; it runs only where a TF venv exists at ``/tmp/tfvenv`` (never a bertkit dependency).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import textwrap
from pathlib import Path

import numpy as np
import pytest

from bertkit.weights import crc32c as crc_module
from bertkit.weights.crc32c import crc32c, mask, unmask
from bertkit.weights.tf_bundle import (
    _block_entries,
    _build_table,
    _decode_handle,
    _entry_bytes,
    _header_bytes,
    _parse_entry,
    _read_block,
    _read_table,
    read_bundle,
    write_bundle,
)
from conftest import run_guarded

FIXTURES = Path(__file__).parent / "fixtures" / "tf"
CKPT = "bert_model.ckpt"
DATA = ".data-00000-of-00001"
TF_PYTHON = Path("/tmp/tfvenv/bin/python")
BERT_FIXTURES = ["tiny_pretraining", "tiny_squad", "tiny_classifier"]
H = 36


# --------------------------------------------------------------------------------------------------------------------
# CRC-32C


def bitwise_crc32c(data: bytes) -> int:
    """The definition, one bit at a time: slow, obviously right."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def test_crc32c_known_vectors():
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E  # RFC 3720 B.4 test vectors
    assert crc32c(b"") == 0
    assert crc32c(b"a") == bitwise_crc32c(b"a")


@pytest.mark.parametrize("geometry", [None, (8, 4), (4, 2), (16, 8)])
def test_crc32c_matches_bitwise_reference(monkeypatch, geometry):
    """Every length, with the real block geometry and with tiny ones that push short buffers through blocks,
    the tree fold, front-padded tails and the running fold across blocks."""
    if geometry is not None:
        monkeypatch.setattr(crc_module, "_K", geometry[0])
        monkeypatch.setattr(crc_module, "_L", geometry[1])
        monkeypatch.setattr(crc_module, "_SMALL", 0)
    rng = np.random.default_rng(0)
    for n in [*range(0, 140), 255, 256, 257, 511, 512, 513, 1000, 1023, 1024, 1025, 3000]:
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert crc32c(data) == bitwise_crc32c(data), n


def test_crc32c_large_buffers_agree_across_geometries(monkeypatch):
    """Several real 4 MiB blocks plus a ragged tail, against a different (small-block) geometry that was checked
    against the bitwise definition above."""
    rng = np.random.default_rng(1)
    block = crc_module._K * crc_module._L
    data = rng.integers(0, 256, 2 * block + 12345, dtype=np.uint8)
    expected = [crc32c(data[:n]) for n in (block - 1, block, block + 1, 2 * block + 12345)]
    monkeypatch.setattr(crc_module, "_K", 1 << 10)
    monkeypatch.setattr(crc_module, "_L", 1 << 3)
    assert [crc32c(data[:n]) for n in (block - 1, block, block + 1, 2 * block + 12345)] == expected


def test_crc32c_accepts_bytes_like_and_arrays():
    values = np.random.default_rng(2).standard_normal((7, 5)).astype(np.float32)
    raw = values.tobytes()
    expected = bitwise_crc32c(raw)
    assert crc32c(raw) == expected
    assert crc32c(bytearray(raw)) == expected
    assert crc32c(memoryview(raw)) == expected
    assert crc32c(memoryview(values)) == expected
    assert crc32c(values) == expected
    assert crc32c(np.asfortranarray(values)) == expected  # bytes in C order, whatever the layout
    assert crc32c(np.float32(1.5).reshape(())) == bitwise_crc32c(np.float32(1.5).tobytes())


def test_mask_roundtrip():
    assert mask(0) == 0xA282EAD8
    rng = np.random.default_rng(3)
    for crc in [0, 1, 0xFFFFFFFF, 0xE3069283, *map(int, rng.integers(0, 2**32, 100, dtype=np.uint64))]:
        masked = mask(crc)
        assert 0 <= masked < 2**32
        assert unmask(masked) == crc
    assert mask(mask(0xE3069283)) != mask(0xE3069283)


# --------------------------------------------------------------------------------------------------------------------
# The TF-written fixtures


def reference(name: str) -> dict[str, np.ndarray]:
    with np.load(FIXTURES / name / "reference.npz") as npz:
        return {k: npz[k] for k in npz.files}


def assert_exactly_equal(got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        assert got[name].dtype == value.dtype, name
        assert got[name].shape == value.shape, name
        assert got[name].tobytes() == value.tobytes(), name  # bit for bit


@pytest.mark.parametrize("name", BERT_FIXTURES)
def test_read_tf_written_bert_checkpoints(name):
    tensors = read_bundle(FIXTURES / name / CKPT, verify=True)
    assert_exactly_equal(tensors, reference(name))
    assert list(tensors) == sorted(tensors, key=lambda k: k.encode())
    assert tensors["bert/embeddings/word_embeddings"].shape == (99, H)
    assert tensors["bert/embeddings/token_type_embeddings"].shape == (3, H)
    assert tensors["bert/embeddings/position_embeddings"].shape == (40, H)
    assert tensors["bert/encoder/layer_1/intermediate/dense/kernel"].shape == (H, 37)  # kernels are [in, out]
    assert tensors["bert/encoder/layer_1/output/dense/kernel"].shape == (37, H)
    assert tensors["global_step"].dtype == np.int64 and tensors["global_step"].shape == ()
    assert any(k.endswith("/adam_m") for k in tensors) and any(k.endswith("/adam_v") for k in tensors)
    assert all(t.flags.c_contiguous and t.flags.writeable for t in tensors.values())  # owned copies, not the map
    config = json.loads((FIXTURES / name / "bert_config.json").read_text())
    assert config["hidden_size"] == H and config["vocab_size"] == 99
    vocab = (FIXTURES / name / "vocab.txt").read_text().splitlines()
    assert len(vocab) == 99 and vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def test_fixture_heads():
    pre = read_bundle(FIXTURES / "tiny_pretraining" / CKPT)
    assert pre["cls/seq_relationship/output_weights"].shape == (2, H)
    assert pre["cls/predictions/output_bias"].shape == (99,)
    assert int(pre["global_step"]) == 1000
    squad = read_bundle(FIXTURES / "tiny_squad" / CKPT)
    assert squad["cls/squad/output_weights"].shape == (2, H) and squad["cls/squad/output_bias"].shape == (2,)
    clf = read_bundle(FIXTURES / "tiny_classifier" / CKPT)
    assert clf["output_weights"].shape == (3, H) and clf["output_bias"].shape == (3,)
    backbone = [k for k in pre if k.startswith("bert/") and "adam" not in k]
    for k in backbone:  # the same backbone values in all three
        assert np.array_equal(pre[k], squad[k]) and np.array_equal(pre[k], clf[k]), k


def test_read_tf_written_dtypes():
    with pytest.warns(UserWarning, match="'string' of dtype DT_STRING"):
        tensors = read_bundle(FIXTURES / "tiny_dtypes" / CKPT)
    assert_exactly_equal(tensors, reference("tiny_dtypes"))
    assert tensors["bfloat16"].dtype == np.float32
    assert tensors["float16"].dtype == np.float16 and tensors["bool"].dtype == np.bool_
    assert tensors["scalar"].shape == () and tensors["empty"].shape == (0, 3)


def test_accepts_index_path_and_pathlike():
    a = read_bundle(FIXTURES / "tiny_squad" / (CKPT + ".index"))
    b = read_bundle(str(FIXTURES / "tiny_squad" / CKPT))
    assert_exactly_equal(a, b)


def test_partitioned_variables_are_refused():
    with pytest.raises(ValueError, match=r"partitioned \(sliced\) variables \('sliced'\)"):
        read_bundle(FIXTURES / "tiny_partitioned" / CKPT)


@pytest.mark.parametrize("name", BERT_FIXTURES)
def test_write_is_byte_identical_to_tensorflow(tmp_path, name):
    write_bundle(tmp_path / CKPT, read_bundle(FIXTURES / name / CKPT))
    for suffix in (".index", DATA):
        assert (tmp_path / (CKPT + suffix)).read_bytes() == (FIXTURES / name / (CKPT + suffix)).read_bytes(), suffix
    assert sorted(os.listdir(tmp_path)) == [CKPT + DATA, CKPT + ".index"]  # no temp files left behind


# --------------------------------------------------------------------------------------------------------------------
# Corruption and missing pieces


def copy_fixture(tmp_path: Path, name: str = "tiny_pretraining") -> Path:
    for suffix in (".index", DATA):
        shutil.copy(FIXTURES / name / (CKPT + suffix), tmp_path / (CKPT + suffix))
    return tmp_path / CKPT


def entry_of(prefix: Path, tensor: str):
    records = dict(_read_table((prefix.parent / (prefix.name + ".index")).read_bytes()))
    return _parse_entry(records[tensor.encode()])


def test_flipped_data_byte_names_the_tensor(tmp_path):
    prefix = copy_fixture(tmp_path)
    name = "bert/encoder/layer_1/attention/self/key/kernel"
    entry = entry_of(prefix, name)
    data = bytearray((tmp_path / (CKPT + DATA)).read_bytes())
    data[entry.offset + entry.size // 2] ^= 0x10
    (tmp_path / (CKPT + DATA)).write_bytes(data)
    with pytest.raises(ValueError, match=rf"{DATA}: checksum mismatch for tensor '{name}'"):
        read_bundle(prefix)
    unchecked = read_bundle(prefix, verify=False)
    expected = reference("tiny_pretraining")
    assert not np.array_equal(unchecked[name], expected[name])
    assert all(np.array_equal(unchecked[k], v) for k, v in expected.items() if k != name)


@pytest.mark.parametrize("keep", [0, 10, 47, 200, -1, -10, -48, -49])
def test_truncated_index(tmp_path, keep):
    prefix = copy_fixture(tmp_path)
    index = tmp_path / (CKPT + ".index")
    data = index.read_bytes()
    index.write_bytes(data[:keep])
    with pytest.raises(ValueError, match=rf"{CKPT}\.index is not a readable TensorFlow checkpoint index"):
        read_bundle(prefix)


def test_flipped_index_byte_is_a_checksum_error(tmp_path):
    prefix = copy_fixture(tmp_path)
    index = tmp_path / (CKPT + ".index")
    data = bytearray(index.read_bytes())
    data[100] ^= 0x01
    index.write_bytes(data)
    with pytest.raises(ValueError, match=r"\.index .*checksum mismatch in the data block"):
        read_bundle(prefix)


def test_bad_magic(tmp_path):
    prefix = copy_fixture(tmp_path)
    index = tmp_path / (CKPT + ".index")
    data = bytearray(index.read_bytes())
    data[-1] ^= 0xFF
    index.write_bytes(data)
    with pytest.raises(ValueError, match="bad magic number"):
        read_bundle(prefix)


@pytest.mark.parametrize("cut", [1, 1000, 148956])
def test_truncated_data(tmp_path, cut):
    prefix = copy_fixture(tmp_path)
    data_file = tmp_path / (CKPT + DATA)
    data = data_file.read_bytes()
    data_file.write_bytes(data[:len(data) - cut])
    with pytest.raises(ValueError, match=rf"{DATA} is truncated or corrupt: tensor '.+' needs bytes"):
        read_bundle(prefix)


def test_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nothing\.ckpt\.index is missing"):
        read_bundle(tmp_path / "nothing.ckpt")
    with pytest.raises(FileNotFoundError, match="is a directory"):
        read_bundle(tmp_path)
    prefix = copy_fixture(tmp_path)
    (tmp_path / (CKPT + DATA)).unlink()
    with pytest.raises(FileNotFoundError, match=rf"{DATA} is missing"):
        read_bundle(prefix)


def write_raw_bundle(prefix: Path, entries: dict[str, bytes], header: bytes, shards: dict[int, bytes]) -> None:
    records = [(b"", header), *sorted((k.encode(), v) for k, v in entries.items())]
    (prefix.parent / (prefix.name + ".index")).write_bytes(_build_table(records))
    for shard, data in shards.items():
        (prefix.parent / f"{prefix.name}.data-{shard:05d}-of-{len(shards):05d}").write_bytes(data)


def test_multi_shard_bundle(tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([7, -8], dtype=np.int64)
    c = np.array([1.5], dtype=np.float64)
    entries = {
        "a": _entry_bytes(1, a.shape, 0, a.nbytes, crc32c(a)),
        "b": _entry_bytes(9, b.shape, 0, b.nbytes, crc32c(b)),
        "c": _entry_bytes(2, c.shape, b.nbytes, c.nbytes, crc32c(c)),
    }
    entries["b"] += b"\x18\x01"  # shard_id = 1
    entries["c"] += b"\x18\x01"
    header = b"\x08\x02" + _header_bytes(1)[2:]  # num_shards = 2
    write_raw_bundle(tmp_path / "m", entries, header, {0: a.tobytes(), 1: b.tobytes() + c.tobytes()})
    got = read_bundle(tmp_path / "m")
    assert_exactly_equal(got, {"a": a, "b": b, "c": c})
    (tmp_path / "m.data-00001-of-00002").unlink()
    with pytest.raises(FileNotFoundError, match=r"m\.data-00001-of-00002 is missing"):
        read_bundle(tmp_path / "m")


def test_big_endian_and_unsupported_dtypes_are_refused(tmp_path):
    a = np.zeros(2, dtype=np.float32)
    entry = _entry_bytes(1, a.shape, 0, a.nbytes, crc32c(a))
    write_raw_bundle(tmp_path / "be", {"a": entry}, _header_bytes(1) + b"\x10\x01", {0: a.tobytes()})
    with pytest.raises(ValueError, match=r"be\.index is a big-endian checkpoint"):
        read_bundle(tmp_path / "be")
    variant = _entry_bytes(21, (), 0, 0, 0)
    write_raw_bundle(tmp_path / "v", {"v": variant}, _header_bytes(1), {0: b""})
    with pytest.raises(ValueError, match=r"v\.index: tensor 'v' has dtype DT_VARIANT, which is not supported"):
        read_bundle(tmp_path / "v")
    wrong_size = _entry_bytes(1, (3,), 0, 8, crc32c(a))
    write_raw_bundle(tmp_path / "w", {"w": wrong_size}, _header_bytes(1), {0: a.tobytes()})
    with pytest.raises(ValueError, match="should take 12 bytes but its entry says 8"):
        read_bundle(tmp_path / "w")
    write_raw_bundle(tmp_path / "n", {}, _header_bytes(1)[:2], {0: b""})  # header without a version is still fine
    assert read_bundle(tmp_path / "n") == {}


def test_compressed_blocks_are_refused(tmp_path):
    table = bytearray(_build_table([(b"", _header_bytes(1))]))
    block_size = 6 + 3 + 8  # one entry (3 varints + 0-byte key + 6-byte value) + one restart + restart count
    table[block_size] = 1  # compression type Snappy; fix the checksum so that the type is what's wrong
    table[block_size + 1:block_size + 5] = struct.pack("<I", mask(crc32c(bytes(table[:block_size + 1]))))
    (tmp_path / "z.index").write_bytes(table)
    with pytest.raises(ValueError, match=r"z\.index .*compressed with Snappy \(type 1\)"):
        read_bundle(tmp_path / "z")


# --------------------------------------------------------------------------------------------------------------------
# Writing


def many_dtypes() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    floats = rng.standard_normal((4, 3))
    nan_payload = np.array([np.nan, -np.inf, np.inf, -0.0], dtype=np.float32)
    nan_payload.view(np.uint32)[0] = 0x7FC12345  # a NaN with a payload must survive bit for bit
    return {
        "f16": floats.astype(np.float16),
        "f32": floats.astype(np.float32),
        "f64": floats,
        "special": nan_payload,
        "i8": rng.integers(-128, 128, 9, dtype=np.int8),
        "u8": rng.integers(0, 256, (3, 3), dtype=np.uint8),
        "i16": rng.integers(-2**15, 2**15, 5, dtype=np.int16),
        "u16": rng.integers(0, 2**16, 5, dtype=np.uint16),
        "i32": rng.integers(-2**31, 2**31, (2, 2, 2), dtype=np.int32),
        "u32": rng.integers(0, 2**32, 3, dtype=np.uint32),
        "i64": rng.integers(-2**63, 2**63 - 1, 4, dtype=np.int64),
        "u64": rng.integers(0, 2**64 - 1, 4, dtype=np.uint64),
        "bool": rng.integers(0, 2, 7).astype(bool),
        "c64": (floats[0] + 1j * floats[1]).astype(np.complex64),
        "c128": floats[2] + 1j * floats[3],
        "scalar": np.array(2.5, dtype=np.float32),
        "step": np.array(123456789012, dtype=np.int64),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "layer_10/x": np.ones(2, dtype=np.float32),  # byte order of names: "layer_10" < "layer_2"
        "layer_2/x": np.full(2, 2.0, dtype=np.float32),
        "ünïcödé/名前": np.arange(3, dtype=np.int32),
    }


def test_round_trip_many_dtypes(tmp_path):
    tensors = many_dtypes()
    write_bundle(tmp_path / "m.ckpt", tensors)
    got = read_bundle(tmp_path / "m.ckpt")
    assert_exactly_equal(got, tensors)
    assert list(got) == sorted(tensors, key=lambda k: k.encode("utf-8"))


def test_round_trip_converts_layouts_and_byte_orders(tmp_path):
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    tensors = {
        "transposed": base.T,
        "strided": base[:, ::2],
        "big_endian": base.astype(">f4"),
        "big_endian_i64": np.arange(3, dtype=">i8"),
        "python_list": [[1.0, 2.0]],
    }
    write_bundle(tmp_path / "m.ckpt.index", tensors)  # the .index form works for writing too
    got = read_bundle(tmp_path / "m.ckpt")
    assert np.array_equal(got["transposed"], base.T) and got["transposed"].flags.c_contiguous
    assert np.array_equal(got["strided"], base[:, ::2])
    assert got["big_endian"].dtype == np.float32 and np.array_equal(got["big_endian"], base)
    assert got["big_endian_i64"].dtype == np.int64 and got["big_endian_i64"].tolist() == [0, 1, 2]
    assert got["python_list"].dtype == np.float64 and got["python_list"].shape == (1, 2)


def many_long_names(n: int = 2000) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(6)
    return {f"{rng.bytes(150).hex()}/var_{i}": np.array([i], dtype=np.int32) for i in range(n)}


def data_blocks(index_file: Path) -> int:
    """How many data blocks a table has: the entries of its index block."""
    data = index_file.read_bytes()
    _, _, pos = _decode_handle(data, len(data) - 48, len(data))
    offset, size, _ = _decode_handle(data, pos, len(data))
    return len(list(_block_entries(_read_block(data, offset, size, "index block"), "index block")))


def test_round_trip_multi_block_index(tmp_path):
    """Enough long names for several 256 KiB data blocks in the index (with restarts every 16 keys in each)."""
    tensors = many_long_names()
    write_bundle(tmp_path / "big", tensors)
    assert data_blocks(tmp_path / "big.index") == 3
    assert len(_read_table((tmp_path / "big.index").read_bytes())) == 2001
    assert_exactly_equal(read_bundle(tmp_path / "big"), tensors)
    assert data_blocks(FIXTURES / "tiny_pretraining" / (CKPT + ".index")) == 1


def test_write_refuses_what_tf_cannot_hold(tmp_path):
    with pytest.raises(ValueError, match="tensor 'o' has dtype object"):
        write_bundle(tmp_path / "x", {"o": np.array([object()])})
    with pytest.raises(ValueError, match="tensor 's' has dtype <U3"):
        write_bundle(tmp_path / "x", {"s": np.array(["abc"])})
    with pytest.raises(ValueError, match="non-empty strings"):
        write_bundle(tmp_path / "x", {"": np.zeros(1)})
    assert not list(tmp_path.iterdir())  # nothing written


def test_write_replaces_existing_checkpoint(tmp_path):
    write_bundle(tmp_path / "m", {"a": np.zeros(1000, dtype=np.float32)})
    write_bundle(tmp_path / "m", {"b": np.ones(2, dtype=np.int8)})
    assert_exactly_equal(read_bundle(tmp_path / "m"), {"b": np.ones(2, dtype=np.int8)})


# --------------------------------------------------------------------------------------------------------------------
# TensorFlow reads what write_bundle wrote (only where a TF venv has been set up by hand)

TF_CHECK = textwrap.dedent("""
    import os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import numpy as np
    import tensorflow as tf

    prefix, npz, tf_prefix = sys.argv[1:4]
    expected = dict(np.load(npz))
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    assert sorted(shapes) == sorted(expected), (sorted(shapes), sorted(expected))
    for name, value in expected.items():
        got = reader.get_tensor(name)
        got = np.asarray(got)
        assert got.dtype == value.dtype, (name, got.dtype, value.dtype)
        assert got.shape == value.shape, (name, got.shape, value.shape)
        assert got.tobytes() == value.tobytes(), name
    # TF's own writer, the same tensors in the same (sorted) order, for a byte-for-byte comparison.
    names = sorted(expected, key=lambda k: k.encode())
    tf.raw_ops.SaveV2(prefix=tf_prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(expected[k]) for k in names])
    print("TF read", len(expected), "tensors")
""")


@pytest.mark.skipif(not TF_PYTHON.exists(), reason="needs TensorFlow in /tmp/tfvenv (not a bertkit dependency)")
@pytest.mark.parametrize("case", ["dtypes", "bert", "multi_block"])
def test_tensorflow_reads_write_bundle_output(tmp_path, case):
    if case == "dtypes":
        tensors = many_dtypes()
    elif case == "bert":
        tensors = reference("tiny_pretraining")
    else:
        tensors = many_long_names()
    write_bundle(tmp_path / "ours", tensors)
    np.savez(tmp_path / "expected.npz", **tensors)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    result = run_guarded([str(TF_PYTHON), "-c", TF_CHECK, str(tmp_path / "ours"), str(tmp_path / "expected.npz"),
                          str(tmp_path / "theirs")], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "TF read" in result.stdout
    for suffix in (".index", DATA):
        assert (tmp_path / ("ours" + suffix)).read_bytes() == (tmp_path / ("theirs" + suffix)).read_bytes(), suffix
