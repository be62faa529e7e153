"""Batch-encoding throughput of bertkit's tokenizer vs HF's, the bare ``tokenizers`` library and pure Python.

Two workloads on the paragraphs of Jane Austen's six novels (~4 MB, bundled):

* single texts: every paragraph, ``truncation=True, max_length=512``;
* pairs (question / context-like): paragraph i (at most 64 tokens) with paragraph i+1,
  ``truncation="only_second", max_length=128``.

Variants, all on bert-base-uncased's vocabulary:

* ``HF __call__``: ``transformers.BertTokenizerFast`` (Rust), the baseline of the ratios;
* ``bertkit __call__``: ``bertkit.BERTTokenizerFast`` (Rust, Google's rules);
* ``tokenizers encode_batch``: the bare library's ``BertWordPieceTokenizer.encode_batch``
  with the same truncation (Rust ``Encoding`` objects, no conversion to lists);
* ``pure Python``: HF's ``BertTokenizerLegacy.__call__`` on every ``--python-every``-th
  text, its rates taken on that subset (the full corpus would take ~10 s a round).

Variants are interleaved round by round (so machine drift hits all alike) and the table
reports medians. bertkit's ids must equal HF's on both workloads (checked, printed and
asserted); the bare library's and the pure-Python reference's are compared too.

    python benchmarks/tokenizer.py [--rounds 5] [--python-every 20] [--json benchmarks/results/tokenizer.json]

``--json PATH`` writes both tables with the machine, date, commit, command and load average
(``benchmarks/record.py``), as the docs' Benchmarks page shows them.
"""

from __future__ import annotations

import argparse
import operator
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tokenizers
import transformers
from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

from bertkit.resources import BERT_BASE_UNCASED_VOCAB, austen_novels
from bertkit.tokenization import BERTTokenizerFast

sys.path.insert(0, str(Path(__file__).resolve().parent))
import record  # (benchmarks/record.py: result files; imported early, it takes the start's load)

transformers.logging.set_verbosity_error()

HF = "HF BertTokenizerFast.__call__"
BERTKIT = "bertkit BERTTokenizerFast.__call__"
BARE = "tokenizers BertWordPieceTokenizer.encode_batch"
PYTHON = "pure Python BertTokenizerLegacy.__call__"


def paragraphs() -> list[str]:
    return [p for text in austen_novels().values() for p in re.split(r"\n[ \t]*\n", text) if p.strip()]


def hf_fast_tokenizer() -> transformers.PreTrainedTokenizerBase:
    """HF's fast tokenizer as users load it: ``from_pretrained`` on a directory holding ``vocab.txt``.

    (transformers 5 ignores a ``vocab_file=`` argument to the constructor and falls back to a
    five-token vocabulary, hence the directory.)
    """
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(BERT_BASE_UNCASED_VOCAB, Path(d) / "vocab.txt")
        tok = transformers.BertTokenizerFast.from_pretrained(d)
    assert tok.vocab_size == 30522, tok.vocab_size
    return tok


def size_mb(inputs: list) -> float:
    return sum(len(s.encode("utf-8")) for x in inputs for s in (x if isinstance(x, tuple) else (x,))) / 1e6


#: a variant: (the timed call on the inputs, the input_ids of its result per text)
Variant = tuple[Callable[[list], Any], Callable[[Any], list[list[int]]]]


def run_workload(title: str, inputs: list, every: int, rounds: int, variants: dict[str, Variant],
                 unit: str = "texts") -> tuple[bool, dict]:
    """Time ``variants`` round by round, print the table and the id comparison; return whether bertkit's ids are
    HF's and the table (:func:`record.table`: a row per variant, its rates, ratio to HF and ids check)."""
    subset = inputs[::every]
    data = {name: subset if name == PYTHON else inputs for name in variants}
    ids = {name: to_ids(run(data[name])) for name, (run, to_ids) in variants.items()}  # also the warm-up
    times: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(rounds):
        names = list(variants)
        for name in names[r % len(names):] + names[:r % len(names)]:  # a different order each round
            start = time.perf_counter()
            variants[name][0](data[name])
            times[name].append(time.perf_counter() - start)

    heading = (f"{title}: {len(inputs)} {unit}, {size_mb(inputs):.2f} MB (pure Python: every {every}th, "
               f"{len(subset)} {unit}, {size_mb(subset):.2f} MB); median of {rounds} rounds")
    print(f"\n{heading}")
    print(f"{'variant':<48}{'MB/s':>9}{unit + '/s':>11}{'vs HF __call__':>16}")
    rates = {name: size_mb(data[name]) / statistics.median(times[name]) for name in variants}
    for name in variants:
        texts_per_s = len(data[name]) / statistics.median(times[name])
        print(f"{name:<48}{rates[name]:>9.2f}{texts_per_s:>11.0f}{rates[name] / rates[HF]:>16.2f}")
    same = {name: ids[name] == (ids[HF][::every] if name == PYTHON else ids[HF]) for name in variants}
    for name in variants:
        if name != HF:
            print(f"  input_ids identical to HF's: {name}: {same[name]}")
    rows = [{"variant": name, "MB/s": rates[name], f"{unit}/s": round(len(data[name]) / statistics.median(times[name])),
             "vs HF __call__": rates[name] / rates[HF], "input_ids = HF's": "—" if name == HF else same[name]}
            for name in variants]
    return same[BERTKIT], record.table(heading, rows)


def variants(ours, hf, bare, legacy, **call: Any) -> dict[str, Variant]:
    """The four variants with the same truncation settings (``call``: __call__'s keyword arguments).

    Sets the shared bare tokenizer's truncation: make each workload's variants just before running it.
    """
    bare.enable_truncation(call["max_length"], strategy="longest_first" if call["truncation"] is True
                           else call["truncation"])

    def args(inputs: list) -> tuple:  # __call__ takes a batch of pairs as two lists
        return ([a for a, _ in inputs], [b for _, b in inputs]) if isinstance(inputs[0], tuple) else (inputs,)

    input_ids = operator.itemgetter("input_ids")
    return {HF: (lambda x: hf(*args(x), **call), input_ids),
            BERTKIT: (lambda x: ours(*args(x), **call), input_ids),
            BARE: (bare.encode_batch, lambda encodings: [e.ids for e in encodings]),
            PYTHON: (lambda x: legacy(*args(x), **call), input_ids)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--python-every", type=int, default=20, help="pure Python on every n-th text")
    parser.add_argument("--json", type=Path, help="also write both tables here (benchmarks/record.py's format)")
    args = parser.parse_args()

    texts = paragraphs()
    tokenizers_ = (BERTTokenizerFast(BERT_BASE_UNCASED_VOCAB), hf_fast_tokenizer(),
                   tokenizers.BertWordPieceTokenizer(str(BERT_BASE_UNCASED_VOCAB)),
                   BertTokenizerLegacy(str(BERT_BASE_UNCASED_VOCAB)))
    print(f"cpus={os.cpu_count()} RAYON_NUM_THREADS={os.environ.get('RAYON_NUM_THREADS', '-')} "
          f"tokenizers={tokenizers.__version__} transformers={transformers.__version__}")

    ok_single, single = run_workload("single texts, truncation=True, max_length=512", texts, args.python_every,
                                     args.rounds, variants(*tokenizers_, truncation=True, max_length=512))

    lengths = [len(ids) for ids in tokenizers_[0](texts, add_special_tokens=False)["input_ids"]]
    pairs = [(texts[i], texts[i + 1]) for i in range(len(texts) - 1) if lengths[i] <= 64]
    ok_pairs, pair_table = run_workload("pairs (paragraph i of <= 64 tokens, paragraph i+1), "
                                        "truncation='only_second', max_length=128", pairs, args.python_every,
                                        args.rounds, variants(*tokenizers_, truncation="only_second", max_length=128),
                                        unit="pairs")

    print(f"\nbertkit input_ids == HF input_ids: single texts {ok_single}, pairs {ok_pairs}")
    assert ok_single and ok_pairs, "bertkit's input_ids differ from HF BertTokenizerFast's"
    if args.json:
        record.write_result(args.json, "tokenizer", [single, pair_table],
                            title="Tokenizer: batch encoding, bertkit vs HF, tokenizers and pure Python",
                            data={"versions": {"tokenizers": tokenizers.__version__,
                                               "transformers": transformers.__version__}})


if __name__ == "__main__":
    main()
