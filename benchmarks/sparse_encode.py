"""SPLADE document encoding: bertkit's ``SparseEncoder.encode_document`` against sentence-transformers', in one run.

Both load the same sentence-transformers sparse directory (``MLMTransformer`` + ``SpladePooling``, max pooling),
written here by sentence-transformers itself around a BERT masked LM with random weights (speed does not depend on
the weights): the bundled bert-base-uncased vocabulary (30,522 entries, so the head projects onto a real
vocabulary), ``--layers`` layers of width ``--hidden`` (default 6 x 384, the shape of the small published SPLADE
models). The documents are paragraphs of the bundled Austen novels, a seeded sample (so lengths vary, 1 to 256
tokens), the same for both at each of two corpus sizes. Same batch size, same threads; the runs alternate round by
round and each row is the median of the rounds. bertkit runs ``dtype="auto"`` (what it picks on this machine is
printed) and ``dtype="fp32"``; the agreement columns compare the vectors with sentence-transformers'.

A second table says where the time goes: each stage of both pipelines timed alone over the same length-sorted
batches (encoder, MLM head, SPLADE pooling, the rest of ``encode_document``: tokenizing, batching, top-k and the
sparse result).

    python benchmarks/sparse_encode.py [--sizes 100 400] [--batch-size 32] [--rounds 2] [--threads 2]
    python benchmarks/sparse_encode.py --json benchmarks/results/sparse-encode.json
"""

from __future__ import annotations

import argparse
import pathlib
import random
import sys
import tempfile
import warnings
from collections.abc import Callable

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import record  # noqa: E402  (benchmarks/record.py: result files; imported early, it takes the start's load)
from data_corpus import austen_paragraphs  # noqa: E402
from timing import interleaved  # noqa: E402

ST_NAME, AUTO, FP32 = "sentence-transformers encode_document", "bertkit encode_document", "bertkit fp32"


def documents(count: int, seed: int = 0) -> list[str]:
    """``count`` paragraphs of the novels, a seeded sample in random order (short replies to long narration)."""
    pool = list(austen_paragraphs())
    return random.Random(seed).sample(pool, count)


def sparse_directory(out: pathlib.Path, hidden: int, layers: int, max_seq_length: int) -> pathlib.Path:
    """A sentence-transformers SPLADE directory around a random BERT masked LM on the bundled 30,522-entry
    vocabulary, written by sentence-transformers itself."""
    import transformers
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling

    from bertkit.resources import BERT_BASE_UNCASED_VOCAB

    torch.manual_seed(0)
    vocab = BERT_BASE_UNCASED_VOCAB
    config = transformers.BertConfig(vocab_size=sum(1 for _ in vocab.open()), hidden_size=hidden,
                                     num_hidden_layers=layers, num_attention_heads=max(hidden // 64, 1),
                                     intermediate_size=4 * hidden, max_position_embeddings=512)
    transformers.BertForMaskedLM(config).save_pretrained(out / "mlm")
    transformers.BertTokenizerFast(str(vocab), do_lower_case=True).save_pretrained(out / "mlm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MLMTransformer's deprecation: the form most published models have
        first = MLMTransformer(str(out / "mlm"), max_seq_length=max_seq_length)
    SparseEncoder(modules=[first, SpladePooling("max")], device="cpu").save(str(out / "splade"))
    return out / "splade"


def agreement(got: torch.Tensor, want: torch.Tensor) -> dict[str, object]:
    """Max abs difference of the dense vectors and the share of each vector's 32 largest entries found in both."""
    got, want = got.to_dense(), want.to_dense()
    k = min(32, got.shape[1])
    top_a, top_b = got.topk(k).indices, want.topk(k).indices
    shared = sum(len(set(a.tolist()) & set(b.tolist())) for a, b in zip(top_a, top_b)) / (k * len(got))
    return {"max abs diff to ST": f"{(got - want).abs().max().item():.1e}", "top-32 overlap": f"{shared:.4f}"}


def encode_runs(theirs, ours, exact, texts: list[str], batch_size: int) -> dict[str, Callable]:
    """The variants timed: sentence-transformers', bertkit's ``dtype="auto"`` and, when auto is not fp32, fp32."""
    runs = {ST_NAME: lambda: theirs.encode_document(texts, batch_size=batch_size),
            AUTO: lambda: ours.encode_document(texts, batch_size=batch_size, show_progress_bar=False)}
    if exact.dtype_choice.name != ours.dtype_choice.name:
        runs[FP32] = lambda: exact.encode_document(texts, batch_size=batch_size, show_progress_bar=False)
    return runs


def speed_table(texts: list[str], runs: dict[str, Callable], rounds: int) -> tuple[list[dict], dict]:
    vectors = {name: run() for name, run in runs.items()}  # also the warm-up
    seconds = interleaved(runs, rounds, warmup=0)
    base = seconds[ST_NAME]
    rows = [{"corpus": len(texts), "variant": name, "seconds": s, "docs/s": len(texts) / s,
             "x sentence-transformers": base / s, **agreement(vectors[name], vectors[ST_NAME])}
            for name, s in seconds.items()]
    return rows, seconds


def stage_table(ours, theirs, texts: list[str], batch_size: int, rounds: int) -> list[dict]:
    """Seconds per stage of both pipelines over the same length-sorted, padded batches of ``texts``."""
    from bertkit.inference.batching import pad, sorted_batches

    route = ours.route("document")
    rows = route.features(texts)
    values = {"input_ids": route.tokenizer.pad_token_id, "token_type_ids": 0, "attention_mask": 0}
    batches = [pad([rows[i] for i in b], values) for b in sorted_batches([len(r["input_ids"]) for r in rows],
                                                                          batch_size)]
    hf = theirs[0].model  # the transformers BertForMaskedLM inside sentence-transformers' MLMTransformer
    pooling = theirs[1]

    def each(fn):
        return lambda: [fn(b) for b in batches]

    with torch.inference_mode():
        hidden = [hf.bert(**b).last_hidden_state for b in batches]
        logits = [hf.cls(h) for h in hidden]
        ours_hidden = [route.mlm.bert(b["input_ids"], b["attention_mask"], b["token_type_ids"])[0] for b in batches]
        stages = {
            ("sentence-transformers", "encoder"): each(lambda b: hf.bert(**b)),
            ("sentence-transformers", "MLM head [B, L, V]"): lambda: [hf.cls(h) for h in hidden],
            ("sentence-transformers", "SpladePooling"): lambda: [pooling({"token_embeddings": x.clone(),
                                                                          "attention_mask": b["attention_mask"]})
                                                                 for x, b in zip(logits, batches)],
            ("bertkit", "encoder"): each(lambda b: route.mlm.bert(b["input_ids"], b["attention_mask"],
                                                                   b["token_type_ids"])),
            ("bertkit", "MLM head + pooling (real tokens)"): lambda: [route.pool(h, b["attention_mask"])
                                                                      for h, b in zip(ours_hidden, batches)],
        }
        seconds = interleaved({f"{a}: {b}": fn for (a, b), fn in stages.items()}, rounds)
    return [{"library": library, "stage": stage, "seconds": seconds[f"{library}: {stage}"]}
            for library, stage in stages]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 400], help="corpus sizes (documents)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--max-seq-length", type=int, default=256)
    parser.add_argument("--json", type=pathlib.Path, help="also write the tables here (benchmarks/record.py's format)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import sentence_transformers

    import bertkit

    directory = sparse_directory(pathlib.Path(tempfile.mkdtemp()), args.hidden, args.layers, args.max_seq_length)
    theirs = sentence_transformers.SparseEncoder(str(directory), device="cpu")
    ours, exact = bertkit.SparseEncoder(directory), bertkit.SparseEncoder(directory, dtype="fp32")
    chosen = ours.dtype_choice.describe()
    model = (f"BERT L{args.layers}/H{args.hidden} masked LM, vocabulary 30,522, max_seq_length {args.max_seq_length}, "
             f"{args.threads} threads, batch size {args.batch_size}, medians of {args.rounds}")
    print(f"torch {torch.__version__}, sentence-transformers {sentence_transformers.__version__}, {model}\n"
          f"bertkit dtype='auto': {chosen}\n")
    tables, ratios = [], {}
    for size in args.sizes:
        texts = documents(size)
        tokens = sum(len(r["input_ids"]) for r in ours.route("document").features(texts))
        rows, seconds = speed_table(texts, encode_runs(theirs, ours, exact, texts, args.batch_size), args.rounds)
        ratios[size] = {name: seconds[ST_NAME] / s for name, s in seconds.items()}
        title = f"{size:,} paragraphs ({tokens:,} tokens): encode_document"
        print(f"## {title}\n{record.markdown(rows)}\n")
        tables.append(record.table(title, rows, notes=[model, f"bertkit dtype='auto': {chosen}"]))
    size = args.sizes[0]
    stages = stage_table(ours, theirs, documents(size), args.batch_size, args.rounds)
    title = f"Where the time goes: {size:,} paragraphs, each stage alone over the same sorted batches"
    print(f"## {title}\n{record.markdown(stages)}")
    tables.append(record.table(title, stages, notes=[
        "encoder: the BERT layers; MLM head: transform + projection onto the 30,522-entry vocabulary; "
        "the rest of encode_document (tokenizing, padding, top-k, the sparse result) is the difference to the "
        "tables above"]))
    if args.json:
        record.write_result(args.json, "sparse-encode", tables, data={"ratios": ratios, "dtype": chosen},
                            title="SPLADE document encoding: bertkit vs sentence-transformers (sparse_encode.py)")


if __name__ == "__main__":
    main()
