"""bertkit.data: corpus reading, Google's NSP pairs, truncation, static and dynamic masking, shards, sampler, CLI."""

from __future__ import annotations

import json
import pickle
import re

import numpy as np
import pytest
import torch

from bertkit.data import (
    PretrainingCollator,
    PretrainingDataset,
    assemble,
    create_instance_spans,
    create_pretraining_data,
    read_documents,
    split_sentences,
    tokenize_documents,
    truncate_seq_pair,
    truncation_amounts,
)
from bertkit.data.blocks import partition_seed
from bertkit.data.corpus import detect_format
from bertkit.modeling.masking import continuation_table, mask_tokens, whole_word_ids
from bertkit.resources import BERT_BASE_UNCASED_VOCAB, austen_novels
from bertkit.tokenization import BERTTokenizerFast
from bertkit.training import SeededSampler

SPECIAL_IDS = [0, 1, 2, 3, 4]  # [PAD] [UNK] [CLS] [SEP] [MASK]
V = 1000


@pytest.fixture(scope="module")
def austen():
    return austen_novels()


@pytest.fixture(scope="module")
def bert_tokenizer():
    return BERTTokenizerFast(BERT_BASE_UNCASED_VOCAB)


@pytest.fixture(scope="module")
def persuasion_corpus(austen, bert_tokenizer):
    return tokenize_documents(read_documents(austen["persuasion"]), bert_tokenizer)


# ---------------------------------------------------------------------------- masking through the collator

def synthetic_items(n=900, seed=0):
    """[CLS] A [SEP] B [SEP] instances of random ids >= 5 and varied lengths (~117k tokens)."""
    g = torch.Generator().manual_seed(seed)
    items = []
    for length in torch.randint(40, 220, (n,), generator=g).tolist():
        ids = torch.randint(5, V, (length,), generator=g)
        split = length // 2
        ids[0], ids[split - 1], ids[-1] = 2, 3, 3
        types = torch.zeros(length, dtype=torch.long)
        types[split:] = 1
        items.append({"input_ids": ids, "token_type_ids": types, "nsp_labels": torch.tensor(length % 2)})
    return items


def collate_all(collator, items, batch_size=100):
    return [collator(items[i:i + batch_size]) for i in range(0, len(items), batch_size)]


def check_corruption(batches, items, batch_size=100):
    """Totals of (eligible, selected, masked, random, kept) after checking the per-position rules."""
    totals = np.zeros(5, dtype=np.int64)
    for b, batch in enumerate(batches):
        chunk = items[b * batch_size:(b + 1) * batch_size]
        ids = torch.zeros_like(batch["input_ids"])
        for r, item in enumerate(chunk):
            ids[r, :len(item["input_ids"])] = item["input_ids"]
            assert torch.equal(batch["token_type_ids"][r, :len(item["input_ids"])], item["token_type_ids"])
        assert batch["input_ids"].shape[1] % 8 == 0 and batch["input_ids"].dtype == torch.long
        assert torch.equal(batch["nsp_labels"], torch.stack([i["nsp_labels"] for i in chunk]))
        labels, masked, pad = batch["mlm_labels"], batch["input_ids"], batch["attention_mask"] == 0
        selected = labels != -100
        special = torch.isin(ids, torch.tensor(SPECIAL_IDS))
        assert not selected[special | pad].any()  # never a special token or padding
        assert torch.equal(labels[selected], ids[selected])
        assert torch.equal(masked[~selected], ids[~selected])
        eligible = ~special & ~pad
        to_mask = selected & (masked == 4)
        kept = selected & (masked == ids)
        rand = selected & ~to_mask & ~kept
        assert not torch.isin(masked[rand], torch.tensor(SPECIAL_IDS)).any()
        totals += [eligible.sum(), selected.sum(), to_mask.sum(), rand.sum(), kept.sum()]
    return totals


def test_dynamic_masking_statistics_through_the_collator():
    items = synthetic_items()
    collator = PretrainingCollator(V, 4, SPECIAL_IDS, generator=torch.Generator().manual_seed(1))
    eligible, selected, masked, rand, kept = check_corruption(collate_all(collator, items), items)
    assert eligible > 100_000
    assert abs(selected / eligible - 0.15) < 0.01
    assert abs(masked / selected - 0.8) < 0.01
    assert abs(rand / selected - 0.1) < 0.01
    assert abs(kept / selected - 0.1) < 0.01


def test_whole_word_masking_takes_every_piece_of_a_word_or_none():
    items = synthetic_items(seed=2)
    continuation = torch.arange(V) >= 600  # ids 600.. are "##" pieces: words of 1 to many pieces
    collator = PretrainingCollator(V, 4, SPECIAL_IDS, whole_word=True, continuation=continuation,
                                   generator=torch.Generator().manual_seed(3))
    batches = collate_all(collator, items)
    eligible, selected, masked, rand, kept = check_corruption(batches, items)
    assert abs(selected / eligible - 0.15) < 0.015
    assert abs(masked / selected - 0.8) < 0.01 and abs(rand / selected - 0.1) < 0.01
    assert abs(kept / selected - 0.1) < 0.01
    words = chosen = 0
    for b, batch in enumerate(batches):
        for r, item in enumerate(items[b * 100:(b + 1) * 100]):
            ids = item["input_ids"]
            picked = (batch["mlm_labels"][r, :len(ids)] != -100).tolist()
            starts = [i for i, t in enumerate(ids.tolist()) if t < 600]  # a word starts at a non-## piece
            for lo, hi in zip(starts, [*starts[1:], len(ids)]):
                pieces = [picked[i] for i in range(lo, hi) if ids[i] not in SPECIAL_IDS]
                if pieces:
                    assert all(pieces) or not any(pieces), (lo, hi, pieces)
                    words += 1
                    chosen += pieces[0]
    assert words > 20_000
    assert abs(chosen / words - 0.15) < 0.01  # whole words are selected with probability p


def test_max_predictions_caps_rows_and_exact_count_follows_google():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, V, (64, 100), generator=g)
    common = dict(vocab_size=V, mask_token_id=4, special_token_ids=SPECIAL_IDS)
    _, labels = mask_tokens(ids, mlm_probability=0.5, max_predictions=7, generator=g, **common)
    counts = (labels != -100).sum(1)
    assert counts.max() <= 7 and (counts == 7).float().mean() > 0.95
    # whole words: the cap never splits a word
    continuation = torch.arange(V) >= 500
    word_ids = whole_word_ids(ids, continuation)
    _, labels = mask_tokens(ids, mlm_probability=0.5, max_predictions=7, whole_word=True, word_ids=word_ids,
                            generator=g, **common)
    assert (labels != -100).sum(1).max() <= 7
    sel = (labels != -100).long()
    per_word = torch.zeros(64, 101, dtype=torch.long).scatter_add_(1, word_ids, sel)
    size = torch.zeros(64, 101, dtype=torch.long).scatter_add_(1, word_ids, torch.ones_like(sel))
    assert ((per_word == 0) | (per_word == size)).all()
    # Google's count: min(cap, max(1, round(len * p))) with len counting the non-padding tokens
    mask = (torch.arange(100) < torch.randint(3, 101, (64, 1), generator=g)).long()
    _, labels = mask_tokens(ids, attention_mask=mask, mlm_probability=0.15, max_predictions=12, exact_count=True,
                            generator=g, **common)
    expected = (mask.sum(1) * 0.15).round().clamp(min=1, max=12)
    assert torch.equal((labels != -100).sum(1), expected.long())
    with pytest.raises(ValueError, match="word_ids"):
        mask_tokens(ids, whole_word=True, **common)


# ---------------------------------------------------------------------------- NSP pairs

def marker_corpus(n_docs=6, n_sentences=20):
    """Sentences 'dXsY dXsY dXsY.' (4 tokens) in Google's format: every token tells its document and sentence."""
    markers = [f"d{d}s{s}" for d in range(n_docs) for s in range(n_sentences)]
    tokenizer = BERTTokenizerFast(vocab=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *markers])
    text = "\n\n".join("\n".join(f"d{d}s{s} d{d}s{s} d{d}s{s}." for s in range(n_sentences))
                       for d in range(n_docs)) + "\n"
    return text, tokenizer


def sentences_of(tokens):
    """The (document, sentence) of each sentence in a run of marker tokens, checking each is whole."""
    names = [t for t in tokens if t != "."]
    found = [tuple(map(int, re.fullmatch(r"d(\d+)s(\d+)", t).groups())) for t in names[::3]]
    assert names == [f"d{d}s{s}" for d, s in found for _ in range(3)]
    return found


def test_nsp_pairs_follow_google(tmp_path):
    text, tokenizer = marker_corpus()
    assert detect_format(text.splitlines()) == "google"
    out = create_pretraining_data([text], tokenizer, tmp_path, max_seq_length=27, short_seq_prob=0.0, seed=7,
                                  progress=False)
    data = PretrainingDataset(out)
    used = []  # sentences used as A or as a true-next B
    labels = []
    for i in range(len(data)):
        item = data[i]
        tokens = tokenizer.convert_ids_to_tokens(item["input_ids"].tolist())
        split, label = int(item["token_type_ids"].argmax()), int(item["nsp_labels"])
        assert len(tokens) <= 27
        assert tokens[0] == "[CLS]" and tokens[split - 1] == "[SEP]" and tokens[-1] == "[SEP]"
        assert tokens.count("[SEP]") == 2 and tokens.count("[CLS]") == 1
        assert item["token_type_ids"].tolist() == [0] * split + [1] * (len(tokens) - split)
        a, b = sentences_of(tokens[1:split - 1]), sentences_of(tokens[split:-1])
        assert a and b
        for segment in (a, b):  # each segment: consecutive sentences of one document
            assert {d for d, _ in segment} == {segment[0][0]}
            assert [s for _, s in segment] == list(range(segment[0][1], segment[0][1] + len(segment)))
        if label == 0:
            assert b[0] == (a[-1][0], a[-1][1] + 1)  # B really continues A
            used += a + b
        else:
            assert b[0][0] != a[0][0]  # a random B comes from another document
            used += a
        labels.append(label)
    # Google's put-back: every sentence ends up in exactly one A or true-next B
    assert sorted(used) == [(d, s) for d in range(6) for s in range(20)]
    assert 0.3 < np.mean(labels) < 0.7


def test_truncate_seq_pair_cuts_the_longer_side_from_its_ends():
    rng = np.random.default_rng(0)
    fronts = cuts = 0
    for _ in range(300):
        la, lb, limit = int(rng.integers(1, 60)), int(rng.integers(1, 60)), int(rng.integers(2, 70))
        a, b = list(range(la)), list(range(100, 100 + lb))
        ta, tb = truncate_seq_pair(a, b, limit, rng)
        ref_a, ref_b = la, lb  # Google's loop: the longer loses one token at a time, B on a tie
        while ref_a + ref_b > limit:
            ref_a, ref_b = (ref_a - 1, ref_b) if ref_a > ref_b else (ref_a, ref_b - 1)
        assert (len(ta), len(tb)) == (ref_a, ref_b)
        assert len(ta) + len(tb) <= limit and ta and tb
        for kept, full in ((ta, a), (tb, b)):  # a contiguous slice: tokens went from the ends only
            start = full.index(kept[0])
            assert full[start:start + len(kept)] == kept
            fronts += start
            cuts += len(full) - len(kept)
    assert abs(fronts / cuts - 0.5) < 0.05
    assert [int(x) for x in truncation_amounts(5, 5, 10, rng)] == [0, 0, 0, 0]


def test_short_seq_prob_shortens_instances(persuasion_corpus):
    def lengths(p):
        spans = create_instance_spans(persuasion_corpus, max_seq_length=128, short_seq_prob=p, seed=1)
        return (spans.a_end - spans.a_start) + (spans.b_end - spans.b_start) + 3

    full, short = lengths(0.0), lengths(1.0)
    assert full.max() <= 128 and short.max() <= 128
    assert (full >= 100).mean() > 0.85  # targets are max_seq_length - 3: only document tails fall short
    assert short.mean() < 0.75 * full.mean()
    some = lengths(0.5)
    assert short.mean() < some.mean() < full.mean()


# ---------------------------------------------------------------------------- shards, determinism

def test_shards_round_trip(tmp_path, austen, bert_tokenizer, persuasion_corpus):
    out = create_pretraining_data([austen["persuasion"]], bert_tokenizer, tmp_path / "d", seed=5, shard_size=1000,
                                  dupe_factor=2, progress=False)
    index = json.loads((out / "index.json").read_text())
    assert len(index["shards"]) > 1 and index["token_dtype"] == "uint16" and index["vocab_size"] == 30522
    assert index["tokenizer"]["special_token_ids"]["mask_token"] == 103
    assert np.load(out / "shard-00000-000.tokens.npy", mmap_mode="r").dtype == np.uint16
    assert BERTTokenizerFast.from_pretrained(out / "tokenizer").vocab == bert_tokenizer.vocab
    # one block (the book has fewer than PAIRING_TOKENS tokens): its seed derives from the run's seed and its number
    spans = create_instance_spans(persuasion_corpus, max_seq_length=128, short_seq_prob=0.1, dupe_factor=2,
                                  seed=partition_seed(5, 0))
    expected = assemble(persuasion_corpus, spans, cls_token_id=101, sep_token_id=102)
    data = PretrainingDataset(out)
    assert len(data) == len(spans) == index["num_instances"]
    for i in [0, 1, 999, 1000, 1001, len(data) - 1]:
        lo, hi = expected.offsets[i], expected.offsets[i + 1]
        assert data[i]["input_ids"].tolist() == expected.tokens[lo:hi].tolist()
        assert int(data[i]["token_type_ids"].argmax()) == expected.segment_starts[i]
        assert int(data[i]["nsp_labels"]) == expected.nsp_labels[i]
    assert data[-1]["input_ids"].tolist() == data[len(data) - 1]["input_ids"].tolist()
    copy = pickle.loads(pickle.dumps(data))  # without its memory maps, which it re-opens
    assert not copy._maps and copy[1001]["input_ids"].tolist() == data[1001]["input_ids"].tolist()
    with pytest.raises(IndexError):
        data[len(data)]
    # static masking: stored positions and labels become the collator's mlm_labels
    static = PretrainingDataset(create_pretraining_data([austen["persuasion"]], bert_tokenizer, tmp_path / "s",
                                                        seed=5, static_masking=True, progress=False))
    batch = static.collator()([static[i] for i in range(16)])
    for r in range(16):
        item = static[r]
        labels = batch["mlm_labels"][r]
        assert labels.ne(-100).nonzero().squeeze(1).tolist() == item["masked_positions"].tolist()
        assert labels[item["masked_positions"]].tolist() == item["masked_labels"].tolist()
        n = len(item["input_ids"])
        assert len(item["masked_positions"]) == min(20, max(1, round(n * 0.15)))  # Google's count
    with pytest.raises(ValueError, match="dynamic=False"):
        static.collator(dynamic=True)([static[0]])


def test_creation_is_deterministic_and_seeded(tmp_path, austen, bert_tokenizer):
    text = austen["northangerabbey"][:150_000]

    def create(name, seed):
        return create_pretraining_data([text], bert_tokenizer, tmp_path / name, seed=seed, static_masking=True,
                                       whole_word=True, shard_size=300, progress=False)

    a, b, c = create("a", 1), create("b", 1), create("c", 2)
    files = sorted(p.name for p in a.glob("*.npy"))
    assert len(files) > 7 and files == sorted(p.name for p in b.glob("*.npy"))
    for name in files:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert (a / "index.json").read_text() == (b / "index.json").read_text()
    assert (a / "shard-00000-000.tokens.npy").read_bytes() != (c / "shard-00000-000.tokens.npy").read_bytes()
    # other arguments into a directory that holds data are refused, naming what changed ...
    with pytest.raises(ValueError, match=r"other arguments \(whole_word True then, False now.*--overwrite"):
        create_pretraining_data([text[:20_000]], bert_tokenizer, a, seed=1, progress=False)
    # ... and with overwrite, a rewrite with fewer shards leaves no stale shard behind
    create_pretraining_data([text[:20_000]], bert_tokenizer, a, seed=1, progress=False, overwrite=True)
    names = {p.name.split(".")[0] for p in a.glob("*.npy")}
    assert names == {s["name"] for s in json.loads((a / "index.json").read_text())["shards"]}


# ---------------------------------------------------------------------------- sampler and collator resume

def test_collator_generator_state_resumes_masks():
    items = synthetic_items(n=40, seed=5)
    collator = PretrainingCollator(V, 4, SPECIAL_IDS, generator=torch.Generator().manual_seed(0))
    collator(items[:20])
    state = collator.state_dict()
    expected = collator(items[20:])
    other = PretrainingCollator(V, 4, SPECIAL_IDS, generator=torch.Generator().manual_seed(99))
    other.load_state_dict(state)
    got = other(items[20:])
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    other.load_state_dict(state)  # pickled (as for spawned DataLoader workers), the generator goes along
    copy = pickle.loads(pickle.dumps(other))
    assert torch.equal(copy(items[20:])["mlm_labels"], expected["mlm_labels"])


# ---------------------------------------------------------------------------- corpus reading

def test_reads_austen_into_chapters_and_sentences(austen):
    documents = list(read_documents(austen["prideprejudice"]))
    assert detect_format(austen["prideprejudice"].splitlines()[:2000]) == "prose"
    assert len(documents) == 62  # the title page, then 61 chapters
    sentences = [s for d in documents for s in d]
    assert documents[1][0] == ("It is a truth universally acknowledged, that a single man in possession of a "
                               "good fortune, must be in want of a wife.")
    assert "Mr. Bennet replied that he had not." in sentences
    assert '"My dear Mr. Bennet," said his lady to him one day, "have you heard that Netherfield Park is let at ' \
           'last?"' in sentences
    everything = [s for text in austen.values() for d in read_documents(text) for s in d]
    assert len(everything) > 25_000
    assert not any(re.search(r"\b(Mr|Mrs|Dr|St)\.$", s) for s in everything)
    assert not any("\n" in s or "  " in s for s in everything)
    assert not any(re.fullmatch(r"(?i)chapter \w+", s) for s in everything)


def test_sentence_splitter_and_formats(tmp_path):
    assert split_sentences('Mr. and Mrs. J. R. Smith went to St. Paul\'s. "Oh!" said she. "Why?" Wait... '
                           'what? No. It was the U.S. Navy. So did I. Then they left.') == [
        "Mr. and Mrs. J. R. Smith went to St. Paul's.", '"Oh!" said she.', '"Why?"', "Wait... what?", "No.",
        "It was the U.S. Navy.", "So did I.", "Then they left."]
    google = "First sentence here.\nSecond one!\n\n\nOther document.\n"
    path = tmp_path / "g.txt"
    path.write_text(google)
    assert list(read_documents([path])) == [["First sentence here.", "Second one!"], ["Other document."]]
    assert list(read_documents(google)) == list(read_documents(str(path)))
    prose = "CHAPTER I\n\nIt began. Mr. Darcy\nbowed. Then\nhe left.\n\nCHAPTER II\n\nNext day.\n"
    assert list(read_documents(prose)) == [["It began.", "Mr. Darcy bowed.", "Then he left."], ["Next day."]]
    with pytest.raises(ValueError, match="not an existing file"):
        list(read_documents("missing.txt"))
    with pytest.raises(ValueError, match="format"):
        list(read_documents(google, format="xml"))


# ---------------------------------------------------------------------------- CLI end to end

def test_cli_data_create_end_to_end(tmp_path, austen, capsys):
    from bertkit import BERTConfig, BERTForPreTraining
    from bertkit.cli import main

    texts = [austen["persuasion"], austen["northangerabbey"]]
    BERTTokenizerFast.train(iter(texts), vocab_size=2000, show_progress=False).save_pretrained(tmp_path / "tok")
    files = []
    for i, text in enumerate(texts):
        files.append(tmp_path / f"novel{i}.txt")
        files[-1].write_text(text[:120_000], encoding="utf-8")
    out = tmp_path / "data"
    assert main(["data", "create", *map(str, files), "--tokenizer", str(tmp_path / "tok"), "-o", str(out),
                 "--max-seq-length", "64", "--dupe-factor", "2", "--masked-lm-prob", "0.2",
                 "--max-predictions-per-seq", "10", "--whole-word-masking", "--static-masking", "--seed", "3",
                 "--quiet"]) == 0
    assert "instances" in capsys.readouterr().out
    data = PretrainingDataset(out)
    assert data.index["vocab_size"] == 2000 and data.index["whole_word_masking"] and data.static_masking
    assert data.max_seq_length == 64 and len(data) > 500
    tokenizer = data.load_tokenizer()
    continuation = continuation_table(tokenizer.vocab)
    loader = torch.utils.data.DataLoader(data, batch_size=32, sampler=SeededSampler(len(data), seed=0),
                                         collate_fn=data.collator())
    batch = next(iter(loader))
    assert batch["input_ids"].shape[1] <= 64 and batch["nsp_labels"].shape == (32,)
    for r in range(32):  # whole words: a masked ## piece's word start is masked too
        labels = batch["mlm_labels"][r]
        masked = labels.ne(-100).nonzero().squeeze(1).tolist()
        assert 1 <= len(masked) <= 10
        split = int(batch["token_type_ids"][r].argmax())
        for p in masked:
            if continuation[labels[p]] and p - 1 not in (0, split - 1):  # not a piece cut off by truncation
                assert labels[p - 1] != -100
    config = BERTConfig(vocab_size=2000, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=64)
    loss, metrics = BERTForPreTraining(config).training_step(batch)
    assert torch.isfinite(loss) and int(metrics["mlm_tokens"]) == int(batch["mlm_labels"].ne(-100).sum())
