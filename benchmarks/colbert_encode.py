"""ColBERT document encoding: bertkit's ``MultiVectorEncoder.encode_document`` against sentence-transformers 6.2's,
in one run.

Both load the same sentence-transformers 6 ``MultiVectorEncoder`` directory, written here by sentence-transformers
itself (``Transformer`` with ``document_length`` ``--max-seq-length``, a ``Dense`` projection to ``--dim`` applied
to every token, ``MultiVectorMask`` with the punctuation skiplist, ``Normalize``, ``query: `` / ``document: ``
prompts) around a BERT with random weights (speed does not depend on the weights) on the bundled bert-base-uncased
vocabulary, ``--layers`` layers of width ``--hidden`` (default 6 x 384 -> 128). The documents are paragraphs of the
bundled Austen novels, a seeded sample (lengths vary, 1 to 256 tokens), the same for both at each of two corpus
sizes. Same batch size, same threads; the runs alternate round by round and each row is the median of the rounds.
bertkit runs ``dtype="auto"`` (what it picks on this machine is printed) and ``dtype="fp32"``; the agreement
column is the largest difference of any token vector to sentence-transformers' (the same vectors, the same count).

A second table says where the time goes and how close to the machine's limit each encoder runs: both encoders
timed alone over the same length-sorted batches of the first corpus, their useful FLOPs (real tokens only) as a
share of this machine's fp32 GEMM peak measured in the same run (``timing.gemm_peaks``), and bertkit's projection
over the packed scored tokens. An encoder at a share s of the peak can be made at most 1/s times faster in fp32.

    python benchmarks/colbert_encode.py [--sizes 100 400] [--batch-size 32] [--rounds 3] [--threads 2]
    python benchmarks/colbert_encode.py --json benchmarks/results/colbert-encode.json
"""

from __future__ import annotations

import argparse
import pathlib
import string
import sys
import tempfile
from collections.abc import Callable

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import record  # noqa: E402  (benchmarks/record.py: result files; imported early, it takes the start's load)
from sparse_encode import documents  # noqa: E402  (the same seeded paragraph sample as the SPLADE rows)
from timing import forward_flops, gemm_peaks, interleaved, peak_for  # noqa: E402

ST_NAME, AUTO, FP32 = "sentence-transformers encode_document", "bertkit encode_document", "bertkit fp32"


def colbert_directory(out: pathlib.Path, hidden: int, layers: int, dim: int, max_seq_length: int) -> pathlib.Path:
    """A sentence-transformers 6 MultiVectorEncoder directory around a random BERT on the bundled 30,522-entry
    vocabulary, written by sentence-transformers itself."""
    import transformers
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    from bertkit.resources import BERT_BASE_UNCASED_VOCAB

    torch.manual_seed(0)
    vocab = BERT_BASE_UNCASED_VOCAB
    config = transformers.BertConfig(vocab_size=sum(1 for _ in vocab.open()), hidden_size=hidden,
                                     num_hidden_layers=layers, num_attention_heads=max(hidden // 64, 1),
                                     intermediate_size=4 * hidden, max_position_embeddings=512)
    transformers.BertModel(config).save_pretrained(out / "bert")
    transformers.BertTokenizerFast(str(vocab), do_lower_case=True).save_pretrained(out / "bert")
    modules = [Transformer(str(out / "bert"), document_length=max_seq_length,
                           query_expansion={"strategy": "fixed", "length": 32}),
               Dense(hidden, dim, bias=False, activation_function=torch.nn.Identity(),
                     module_input_name="token_embeddings", module_output_name="token_embeddings"),
               MultiVectorMask(skiplist_words=list(string.punctuation)),
               Normalize(module_input_name="token_embeddings", module_output_name="token_embeddings")]
    MultiVectorEncoder(modules=modules, device="cpu", prompts={"query": "query: ", "document": "document: "}
                       ).save(str(out / "colbert"))
    return out / "colbert"


def max_difference(got: list, want: list) -> str:
    """The largest absolute difference of any token vector (ValueError when the vector counts differ)."""
    worst = 0.0
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        if a.shape != b.shape:
            raise ValueError(f"document {i}: {tuple(a.shape)} vectors against sentence-transformers' "
                             f"{tuple(b.shape)}")
        worst = max(worst, (a.float() - b.float()).abs().max().item())
    return f"{worst:.1e}"


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
             "x sentence-transformers": base / s,
             "vectors": sum(len(v) for v in vectors[name]),
             "max abs diff to ST": max_difference(vectors[name], vectors[ST_NAME])}
            for name, s in seconds.items()]
    return rows, seconds


def stage_table(ours, theirs, texts: list[str], batch_size: int, rounds: int) -> list[dict]:
    """Seconds of each encoder alone over the same sorted, padded batches, and their share of the fp32 peak."""
    from bertkit.inference.batching import pad, sorted_batches

    rows = ours.features(texts, ours.prompt("document", None), "document")
    values = {"input_ids": ours.tokenizer.pad_token_id, "token_type_ids": 0, "attention_mask": 0, "scored": 0}
    batches = [pad([rows[i] for i in b], values) for b in sorted_batches([len(r["input_ids"]) for r in rows],
                                                                          batch_size)]
    hf = theirs[0].auto_model  # the transformers BertModel inside sentence-transformers' Transformer
    with torch.inference_mode():
        hidden = [ours._hidden(b["input_ids"], b["attention_mask"], b["token_type_ids"], False) for b in batches]
        stages = {
            ("sentence-transformers", "encoder (transformers BertModel)"): lambda: [hf(
                input_ids=b["input_ids"], attention_mask=b["attention_mask"], token_type_ids=b["token_type_ids"])
                for b in batches],
            ("bertkit", "encoder (unpadded)"): lambda: [ours._hidden(
                b["input_ids"], b["attention_mask"], b["token_type_ids"], False) for b in batches],
            ("bertkit", "projection + normalisation (scored tokens, packed)"): lambda: [
                ours.project(h[b["scored"].bool()]) for h, b in zip(hidden, batches)],
        }
        seconds = interleaved({f"{a}: {b}": fn for (a, b), fn in stages.items()}, rounds)
    config = ours.bert.config
    cfg = {"hidden_size": config.hidden_size, "intermediate_size": config.intermediate_size,
           "num_hidden_layers": config.num_hidden_layers}
    lengths = [len(r["input_ids"]) for r in rows]
    flops = forward_flops(cfg, sum(lengths), lengths)
    peak = peak_for("fp32", gemm_peaks(rounds))
    return [{"library": library, "stage": stage, "seconds": seconds[f"{library}: {stage}"],
             "% of fp32 GEMM peak": 100 * flops / seconds[f"{library}: {stage}"] / 1e9 / peak
             if "encoder" in stage else None}
            for library, stage in stages]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 400], help="corpus sizes (documents)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--dim", type=int, default=128, help="the projection's output size")
    parser.add_argument("--max-seq-length", type=int, default=256, help="the directory's document_length")
    parser.add_argument("--json", type=pathlib.Path, help="also write the tables here (benchmarks/record.py's format)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import sentence_transformers

    import bertkit

    directory = colbert_directory(pathlib.Path(tempfile.mkdtemp()), args.hidden, args.layers, args.dim,
                                  args.max_seq_length)
    theirs = sentence_transformers.MultiVectorEncoder(str(directory), device="cpu")
    ours, exact = bertkit.MultiVectorEncoder(directory), bertkit.MultiVectorEncoder(directory, dtype="fp32")
    chosen = ours.dtype_choice.describe()
    model = (f"BERT L{args.layers}/H{args.hidden} -> {args.dim}, vocabulary 30,522, document_length "
             f"{args.max_seq_length}, punctuation skiplist, {args.threads} threads, batch size {args.batch_size}, "
             f"medians of {args.rounds}")
    print(f"torch {torch.__version__}, sentence-transformers {sentence_transformers.__version__}, {model}\n"
          f"bertkit dtype='auto': {chosen}\n")
    tables, ratios = [], {}
    for size in args.sizes:
        texts = documents(size)
        tokens = sum(len(r["input_ids"]) for r in exact.features(texts, "document: ", "document"))
        rows, seconds = speed_table(texts, encode_runs(theirs, ours, exact, texts, args.batch_size), args.rounds)
        ratios[size] = {name: seconds[ST_NAME] / s for name, s in seconds.items()}
        title = f"{size:,} paragraphs ({tokens:,} tokens): encode_document"
        print(f"## {title}\n{record.markdown(rows)}\n")
        tables.append(record.table(title, rows, notes=[model, f"bertkit dtype='auto': {chosen}"]))
    size = args.sizes[0]
    stages = stage_table(exact, theirs, documents(size), args.batch_size, args.rounds)
    title = f"Where the time goes: {size:,} paragraphs, each stage alone over the same sorted batches (fp32)"
    print(f"## {title}\n{record.markdown(stages)}")
    tables.append(record.table(title, stages, notes=[
        "% of fp32 GEMM peak: the encoder's FLOPs on real tokens (dense layers and attention) per second over the "
        "best fp32 [1024, 768] x [768, 3072] product measured in this run; the rest of encode_document "
        "(tokenizing, batching, the mask) is the difference to the tables above"]))
    if args.json:
        record.write_result(args.json, "colbert-encode", tables, data={"ratios": ratios, "dtype": chosen},
                            title="ColBERT document encoding: bertkit vs sentence-transformers (colbert_encode.py)")


if __name__ == "__main__":
    main()
