"""Any plain-text corpus pretrains: layouts, line endings, BOMs, compression, encodings, one-document
corpora (the held-out split falls back to blocks of sentences), and corpora too small to train on."""

import bz2
import gzip
import lzma

import pytest

from bertkit.data.corpus import detect_format, read_documents
from bertkit.data.split import split_heldout
from bertkit.resources import austen_novels
from bertkit.tasks.pretraining import pretrain_from_text
from bertkit.training import TrainingConfig

PERSUASION = austen_novels()["persuasion"]


def _paragraphs(text: str, n: int) -> list[str]:
    """The first ``n`` real paragraphs (unwrapped) of a bundled novel."""
    blocks = [" ".join(b.split()) for b in text.split("\n\n")]
    return [b for b in blocks if len(b) > 200][:n]


def test_headings_with_titles_split_documents():
    body = "\n\n".join(_paragraphs(PERSUASION, 6))
    text = "\n\n".join(f"CHAPTER {i}. A Title For Chapter {i}.\n\n{body}" for i in range(1, 4)) + "\n"
    documents = list(read_documents(text))
    assert len(documents) == 3
    assert not any("CHAPTER" in sentence for doc in documents for sentence in doc)
    for heading in ("Chapter 4: The Storm", "CHAPTER II -- THE NEWS", "Chapter the First"):
        assert len(list(read_documents(f"{heading}\n\nOne sentence. Two.\n\n{heading}\n\nThree.\n"))) == 2


def test_one_paragraph_per_line_is_read_as_paragraphs():
    paragraphs = _paragraphs(PERSUASION, 40)
    text = "\n".join(paragraphs) + "\n"
    assert detect_format(text.splitlines()) == "paragraphs"
    documents = list(read_documents(text))
    sentences = [s for doc in documents for s in doc]
    # the same sentences as the blank-line separated prose layout gives
    assert sentences == [s for doc in read_documents("\n\n".join(paragraphs) + "\n", format="prose") for s in doc]
    assert len(sentences) > len(paragraphs)


def _zstd_open(path, mode):
    import zstandard

    return zstandard.open(path, mode)


@pytest.mark.parametrize("opener,suffix", [(gzip.open, ".gz"), (bz2.open, ".bz2"), (lzma.open, ".xz"),
                                           (_zstd_open, ".zst")])
def test_compressed_files_read_transparently(tmp_path, opener, suffix):
    text = PERSUASION[:60_000]
    plain = tmp_path / "book.txt"
    plain.write_text(text, encoding="utf-8")
    packed = tmp_path / f"book.txt{suffix}"
    with opener(packed, "wb") as f:
        f.write(text.encode("utf-8"))
    assert list(read_documents(packed)) == list(read_documents(plain))


def test_crlf_and_bom_read_like_plain_text(tmp_path):
    text = PERSUASION[:60_000]
    plain, windows = tmp_path / "plain.txt", tmp_path / "windows.txt"
    plain.write_text(text, encoding="utf-8")
    windows.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode("utf-8"))
    assert list(read_documents(windows)) == list(read_documents(plain))


def test_latin1_file_names_file_and_byte_offset_and_encoding_flag(tmp_path):
    text = "Chapter 1\n\nThe café was full. " * 40 + "\n"
    path = tmp_path / "latin.txt"
    path.write_bytes(text.encode("latin-1"))
    first_bad = text.encode("latin-1").index("é".encode("latin-1"))
    with pytest.raises(ValueError, match=rf"latin\.txt is not valid utf-8 text \(at byte {first_bad}") as error:
        list(read_documents(path))
    assert "--encoding" in str(error.value)
    documents = list(read_documents(path, encoding="latin-1"))
    assert "café" in documents[0][0]


def test_binary_and_unknown_encoding_are_refused(tmp_path):
    binary = tmp_path / "model.bin"
    binary.write_bytes(bytes(range(256)) * 64)
    with pytest.raises(ValueError, match=r"model\.bin looks like a binary file"):
        list(read_documents(binary))
    with pytest.raises(ValueError, match="encoding='klingon' is not a text encoding"):
        list(read_documents(binary, encoding="klingon"))


def test_heldout_split_falls_back_to_blocks_and_never_empties_training():
    one_book = [[f"Sentence {i}." for i in range(2_000)]]
    split = split_heldout(one_book, every=20)
    assert split.train and split.heldout
    assert "blocks" in split.description and "1 document" in split.description
    train_sentences = sum(map(len, split.train))
    assert train_sentences + sum(map(len, split.heldout)) == 2_000
    assert 0.03 < 1 - train_sentences / 2_000 < 0.08  # about one part in twenty held out

    many = [[f"d{d} s{s}." for s in range(5)] for d in range(100)]
    split = split_heldout(many, every=20)
    assert len(split.heldout) == 5 and len(split.train) == 95 and "documents" in split.description

    tiny = [["Only one sentence."]]
    split = split_heldout(tiny, every=20)
    assert split.train == tiny and split.heldout == [] and "too small" in split.description
    for few in ([["a."] * 9], [["a."] * 3, ["b."] * 3]):  # two blocks: one trains, one is held out
        split = split_heldout(few, every=20)
        assert split.train and sum(map(len, split.train)) + sum(map(len, split.heldout)) == sum(map(len, few))


def _tiny_training(**changes) -> TrainingConfig:
    return TrainingConfig(**{**dict(max_steps=4, batch_size=8, learning_rate=1e-3, log_every=2, progress_bar=False),
                             **changes})


TINY = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=37)


def test_one_document_corpus_pretrains_with_a_heldout_set(tmp_path):
    """The reported failure: one book without recognisable headings, one paragraph per line."""
    book = tmp_path / "book.txt"
    book.write_text("\n".join(_paragraphs(PERSUASION, 150)) + "\n", encoding="utf-8")
    result = pretrain_from_text([book], tmp_path / "run", vocab_size=600, max_seq_length=32, progress=False,
                                training=_tiny_training(), model_overrides=TINY)
    assert result.evaluation["selected_positions"] > 0
    assert (tmp_path / "run" / "data" / "heldout" / "index.json").exists()


def test_corpus_too_small_says_how_much_text_is_needed(tmp_path):
    book = tmp_path / "short.txt"
    book.write_text("One short sentence here. And another one.\n\nA third one follows.\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"too small.*batch_size=8\. Give about \d+ KB more text"):
        pretrain_from_text([book], tmp_path / "run", vocab_size=200, max_seq_length=32, progress=False,
                           training=_tiny_training(), model_overrides=TINY)


def test_empty_corpus_is_an_error_naming_the_files(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n   \n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"empty\.txt"):
        pretrain_from_text([empty], tmp_path / "run", vocab_size=200, max_seq_length=32, progress=False,
                           training=_tiny_training(), model_overrides=TINY)


def test_training_without_nsp_uses_contiguous_text_and_reports_no_nsp(tmp_path):
    import json

    book = tmp_path / "book.txt"
    book.write_text(PERSUASION[:80_000], encoding="utf-8")
    result = pretrain_from_text([book], tmp_path / "run", vocab_size=500, max_seq_length=32, progress=False,
                                next_sentence_prediction=False, training=_tiny_training(), model_overrides=TINY)
    from bertkit.data.shards import PretrainingDataset

    data = PretrainingDataset(tmp_path / "run" / "data" / "train")
    assert data.index["random_next_prob"] == 0.0
    labels = [int(data[i]["nsp_labels"]) for i in range(len(data))]
    assert sum(labels) < 0.02 * len(labels)  # only one-token sentences still take a random B
    assert "nsp_labels" not in data.collator(nsp=False)([data[0], data[1]]) and not any(
        "nsp_loss" in json.loads(line) for line in result.metrics_path.read_text().splitlines())
    assert "nsp_accuracy" not in result.evaluation and result.evaluation["selected_positions"] > 0


def test_blank_line_separated_blocks_of_paragraph_lines_are_documents(caplog):
    """A corpus written one document after another (each a block of paragraph lines, a blank line between
    documents, no chapters) was read as one document; a blank line after every paragraph still is not a document
    boundary, and chapter headings still decide where there are any."""
    import logging

    paragraphs = _paragraphs(PERSUASION, 60)
    blocks = [paragraphs[i:i + 3] for i in range(0, 60, 3)]
    corpus = "\n\n".join("\n".join(block) for block in blocks) + "\n"
    with caplog.at_level(logging.INFO, logger="bertkit.data"):
        documents = list(read_documents(corpus))
    assert len(documents) == 20
    assert "a document per blank-line separated block" in caplog.text
    first = [s for p in blocks[0] for s in read_documents(p + "\n", format="paragraphs").__next__()]
    assert documents[0] == first
    spaced = "\n\n".join(paragraphs) + "\n"  # a blank line after every paragraph: one document, as before
    assert len(list(read_documents(spaced, format="paragraphs"))) == 1
    chaptered = "\n\n".join(f"CHAPTER {i}\n\n" + "\n".join(block) for i, block in enumerate(blocks[:4], 1)) + "\n"
    assert len(list(read_documents(chaptered, format="paragraphs"))) == 4


def test_jsonl_corpora_hold_a_document_per_line(tmp_path):
    """C4 / FineWeb-style JSON lines: a document per line from its text field (compressed too); a line that is
    not such an object is refused naming the file and line."""
    import json

    texts = ["\n".join(_paragraphs(PERSUASION, 60)[i:i + 2]) for i in range(0, 12, 2)]
    rows = [json.dumps({"text": text, "url": f"https://example.org/{i}"}) for i, text in enumerate(texts)]
    plain = tmp_path / "part-0.jsonl"
    plain.write_text("\n".join(rows) + "\n\n", encoding="utf-8")
    documents = list(read_documents(plain))
    assert len(documents) == 6
    assert documents[0] == [s for doc in read_documents(texts[0] + "\n", format="paragraphs") for s in doc]
    packed = tmp_path / "part-0.jsonl.gz"
    with gzip.open(packed, "wt", encoding="utf-8") as f:
        f.write("\n".join(rows) + "\n")
    assert list(read_documents(packed)) == documents
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"content": texts[0]}) + "\n", encoding="utf-8")
    assert list(read_documents(other, text_field="content")) == documents[:1]
    with pytest.raises(ValueError, match=r"other.jsonl, line 1: no text in field 'text' \(found: \['content'\]\)"):
        list(read_documents(other))
    broken = tmp_path / "broken.jsonl"
    broken.write_text(rows[0] + "\n{not json\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken.jsonl, line 2: not JSON"):
        list(read_documents(broken))
