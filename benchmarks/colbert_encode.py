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
from timing import interleaved  # noqa: E402

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
    if args.json:
        record.write_result(args.json, "colbert-encode", tables, data={"ratios": ratios, "dtype": chosen},
                            title="ColBERT document encoding: bertkit vs sentence-transformers (colbert_encode.py)")


if __name__ == "__main__":
    main()
