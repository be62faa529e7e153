"""A huge text costs what the model reads of it: every reader cuts texts before tokenizing (issue 38, fault 4).

``bertkit embed`` and ``bertkit embed mine`` on a several-MB line peak within 1.5x of the same commands on a
short line (resident memory of one process, measured by the kernel); the training collate tokenizes a bounded
window of it; and the answers (vectors, scores, entities) are those of the whole texts.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
import pytest
import torch

import bertkit
from bertkit.pipelines import pipeline
from bertkit.sentence import SentenceTransformer
from bertkit.sentence.data import PairCollator, RowBatch
from bertkit.tasks.readers import read_rows
from bertkit.tokenization.cut import CHARS_PER_TOKEN
from test_embedding_mining import tiny_model

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "of", "paris", "is", "capital", "france", "emma",
         "wrote", "who", "austen", "jane", "novel", "in", "lived", "city", "hello", "world", "good", "bad", "movie",
         "river", "house", "letter", "walk", "rain", "garden", "ball", "sister", "mother", "father", ",", "."]


def words(count: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS[5:]) for _ in range(count))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A random tiny BERT that reads 32 tokens, with a word vocabulary (mean pooling)."""
    return tiny_model(tmp_path_factory.mktemp("long") / "tiny", WORDS, max_positions=32)


PEAKS = textwrap.dedent("""
    import resource, sys
    from bertkit.cli import embed

    def peak_mb():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    model, root = sys.argv[1:]
    peaks = []
    for size in ("short", "long"):
        embed.main([model, "--input", f"{root}/{size}.txt", "-o", f"{root}/{size}.npy", "--dtype", "fp32"])
        embed.main(["mine", model, "--data", f"{root}/{size}.jsonl", "-o", f"{root}/{size}-mined.jsonl",
                    "--range-max", "4", "--num-negatives", "1", "--dtype", "fp32"])
        peaks.append(peak_mb())
    print(*peaks)
""")


def test_a_huge_line_costs_what_a_short_one_does(tiny, tmp_path):
    """One process embeds and mines a file with a short first line, then one with a 6 MB first line: the second
    peak stays within 1.5x of the first (before the cut: over 2x, tokenizing ~1.3M tokens for a 32-token model)."""
    others = [words(12, seed) for seed in range(1, 9)]
    for size, first in (("short", words(12, 0)), ("long", words(700_000, 0))):
        (tmp_path / f"{size}.txt").write_text("\n".join([first, *others]) + "\n", encoding="utf-8")
        rows = [{"anchor": a, "positive": words(12, 100 + i)} for i, a in enumerate([first, *others])]
        (tmp_path / f"{size}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", PEAKS, str(tiny), str(tmp_path)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    short, long = map(float, done.stdout.split()[-2:])
    assert long <= 1.5 * short, f"peak {long:.0f} MB with the long line, {short:.0f} MB with the short one"
    start = words(700_000, 0)[:2000]  # ~330 tokens: the model reads the first 32 of them
    want = whole_text_vectors(SentenceTransformer(tiny), [start])[0]
    np.testing.assert_allclose(np.load(tmp_path / "long.npy")[0], want, atol=1e-5)


def whole_text_vectors(model: SentenceTransformer, texts: list[str], side: str = "right",
                       prefix: str = "") -> np.ndarray:
    """Sentence vectors with the whole texts tokenized (no cut), for comparison."""
    encoded = model.tokenizer([prefix + t for t in texts], truncation=True, max_length=model.max_seq_length,
                              truncation_side=side, return_token_type_ids=True)
    rows = [{key: encoded[key][i] for key in ("input_ids", "token_type_ids", "attention_mask")}
            for i in range(len(texts))]
    return torch.stack(model.embed_features(rows, prefix=prefix)).numpy()


def odd_texts() -> list[str]:
    """Long texts whose first and last tokens are spread out: runs of control characters, unknown words."""
    return [words(600, 1), ("\x00" * 60 + " emma ") * 100, "x" * 150 + " " + words(400, 2) + " " + "é" * 120,
            words(400, 3).replace(" ", "\u3000"), words(10, 4)]


@pytest.mark.parametrize("side", ["right", "left"])
def test_sentence_vectors_of_long_texts_are_the_whole_texts(tiny, side):
    model = SentenceTransformer(tiny)
    texts = odd_texts()
    got = model.embed_features(model.features(texts, "who ", side), prefix="who ")
    np.testing.assert_allclose(torch.stack(got).numpy(), whole_text_vectors(model, texts, side, "who "), atol=1e-6)
    generic = pipeline("embeddings", model=bertkit.BERT.from_pretrained(tiny), tokenizer=model.tokenizer,
                       dtype="fp32")
    np.testing.assert_allclose(np.array(generic(texts, truncation_side=side)),
                               whole_text_vectors(model, texts, side), atol=1e-5)


def test_pair_scores_of_long_texts_are_the_whole_pairs(tiny):
    reranker = pipeline("rerank", model=bertkit.BERTForSequenceClassification.from_pretrained(tiny, num_labels=1),
                        tokenizer=bertkit.BERTTokenizerFast.from_pretrained(tiny), dtype="fp32")
    texts = odd_texts()
    for truncation in ("only_second", "longest_first"):
        for query in ("who wrote emma", words(40, 5), texts[0]):
            if truncation == "only_second" and len(query) > 20:
                continue
            got = [r["score"] for r in sorted(reranker(query, texts, truncation=truncation), key=lambda r: r["index"])]
            features = [dict(reranker.tokenizer(query, t, truncation=truncation, max_length=reranker.max_length,
                                                return_token_type_ids=True)) for t in texts]
            want = [reranker.score(logits, False) for logits in reranker.forward(features)]
            np.testing.assert_allclose(got, want, atol=1e-6, err_msg=f"{truncation} {query[:20]}")


def test_entities_of_a_text_cut_on_the_left_point_into_the_whole_text(tiny):
    tagger = pipeline("token-classification",
                      model=bertkit.BERTForTokenClassification.from_pretrained(tiny, num_labels=3),
                      tokenizer=bertkit.BERTTokenizerFast.from_pretrained(tiny), dtype="fp32", ignore_labels=())
    text = words(3000, 6) + " jane austen"
    found = tagger(text, truncation_side="left")
    assert found and found[-1]["word"] == "austen"
    assert all(text[e["start"]:e["end"]] == e["word"] for e in found)


def test_the_training_collate_tokenizes_a_bounded_window(tiny, monkeypatch):
    tokenizer = bertkit.BERTTokenizerFast.from_pretrained(tiny)
    huge = words(200_000, 7)  # 1.2 MB
    seen: list[int] = []
    real = type(tokenizer).__call__

    def spy(self, text, *args, **kwargs):
        seen.extend(len(t) for t in (text if isinstance(text, list) else [text]))
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(type(tokenizer), "__call__", spy)
    collate = PairCollator(tokenizer, max_length=32, prompts={"anchor": "query: "})
    batch = collate(RowBatch("pairs.jsonl", [{"anchor": huge, "positive": "emma"}, {"anchor": "who", "positive": huge}],
                             ["pairs.jsonl, line 1", "pairs.jsonl, line 2"]))
    assert max(seen) <= CHARS_PER_TOKEN * 32
    monkeypatch.undo()
    anchor, positive = batch.inputs
    want = tokenizer(["query: " + huge, "query: who"], padding=True, truncation=True, max_length=32,
                     return_tensors="pt")
    assert torch.equal(anchor["input_ids"], want["input_ids"])
    want = tokenizer(["emma", huge], padding=True, truncation=True, max_length=32, return_tensors="pt")
    assert torch.equal(positive["input_ids"], want["input_ids"])


def test_a_json_lines_file_holds_few_copies_of_a_huge_first_line(tmp_path):
    """Reading a JSON-lines file (training pairs, mining pairs) costs about the line twice (the line, its text),
    not six times (io.StringIO held the first line at 4 bytes a character)."""
    line = words(200_000, 8)
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"anchor": line, "positive": "emma"}) + "\n{\"anchor\": \"a\", \"positive\": \"b\"}\n",
                    encoding="utf-8")
    tracemalloc.start()
    try:
        rows = read_rows(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rows[0].values["anchor"] == line and len(rows) == 2
    assert peak < 3 * len(line), f"{peak / len(line):.1f} bytes per character of the line"
