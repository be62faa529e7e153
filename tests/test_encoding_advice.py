"""Decoding errors say what a file's bytes look like and the exact ``--encoding`` that reads them."""

from __future__ import annotations

import codecs

import pytest

from bertkit.data.corpus import read_documents
from bertkit.data.encodings import encoding_advice, sniff_encoding
from bertkit.pipelines.files import count_inputs, read_inputs

TEXT = "Emma Woodhouse, handsome, clever, and rich.\nShe had lived nearly twenty-one years.\n"


@pytest.mark.parametrize(("codec", "prefix", "expected", "looks"), [
    ("utf-16-le", codecs.BOM_UTF16_LE, "utf-16", "UTF-16 little-endian"),
    ("utf-16-be", codecs.BOM_UTF16_BE, "utf-16", "UTF-16 big-endian"),
    ("utf-32-le", codecs.BOM_UTF32_LE, "utf-32", "UTF-32 little-endian"),
    ("utf-32-be", codecs.BOM_UTF32_BE, "utf-32", "UTF-32 big-endian"),
    ("utf-8", codecs.BOM_UTF8, "utf-8-sig", "UTF-8"),
    ("utf-16-le", b"", "utf-16-le", "UTF-16 little-endian"),
    ("utf-16-be", b"", "utf-16-be", "UTF-16 big-endian"),
    ("utf-32-le", b"", "utf-32-le", "UTF-32 little-endian"),
    ("utf-32-be", b"", "utf-32-be", "UTF-32 big-endian"),
])
def test_byte_order_marks_and_nul_patterns_name_the_encoding(codec, prefix, expected, looks):
    guess = sniff_encoding(prefix + TEXT.encode(codec))
    assert guess.encoding == expected and guess.looks.startswith(looks)
    assert TEXT in (prefix + TEXT.encode(codec)).decode(expected)  # the advice really reads the file


def test_legacy_bytes_suggest_single_byte_encodings_and_utf8_suggests_nothing():
    assert sniff_encoding(TEXT.encode("utf-8")) is None
    assert sniff_encoding("café, naïve".encode()) is None
    assert sniff_encoding("café".encode("latin-1")).encoding == "latin-1"
    assert sniff_encoding("“quoted” – dash".encode("cp1252")).encoding == "cp1252"
    assert sniff_encoding(bytes(range(256)) * 4).encoding is None  # binary: no encoding reads it


def test_advice_for_utf16_is_never_latin1():
    advice = encoding_advice(TEXT.encode("utf-16"), "utf-8")
    assert "--encoding utf-16 " in advice and "latin-1" not in advice and "cp1252" not in advice
    assert "damaged" in encoding_advice(TEXT.encode("utf-16"), "utf-16")  # already the right flag


@pytest.mark.parametrize(("codec", "flag"), [("utf-16", "utf-16"), ("utf-32", "utf-32"), ("utf-16-le", "utf-16-le")])
def test_corpus_reader_names_file_and_flag_for_wide_text(tmp_path, codec, flag):
    path = tmp_path / "wide.txt"
    path.write_bytes(TEXT.encode(codec))
    with pytest.raises(ValueError, match=rf"wide\.txt .*--encoding {flag} ") as error:
        list(read_documents(path))
    assert "latin-1" not in str(error.value)
    assert list(read_documents(path, encoding=flag))


def test_embed_inputs_name_file_byte_and_encoding(tmp_path):
    """read_inputs (embed, predict --input) raised the codec's bare message before."""
    path = tmp_path / "texts.txt"
    path.write_bytes(TEXT.encode("utf-16"))
    with pytest.raises(ValueError, match=r"texts\.txt is not valid utf-8 text \(at byte 0.*--encoding utf-16 "):
        list(read_inputs(path))
    assert count_inputs(path, "utf-16") == 2
    latin = tmp_path / "latin.txt"
    latin.write_bytes("ok\ncafé\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin\.txt is not valid utf-8 text \(at byte 6.*--encoding latin-1"):
        list(read_inputs(latin))
    assert list(read_inputs(latin, "latin-1")) == ["ok", "café"]
