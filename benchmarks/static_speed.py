"""Encoding a static model: bertkit against model2vec and sentence-transformers, and all-MiniLM-L6-v2, in one run.

The static model (``--model``: a Model2Vec directory; default a table of all-MiniLM-L6-v2's vocabulary x 256 over
its tokenizer, saved by model2vec: the speed does not depend on the values) is encoded by bertkit
(``load_static(DIR)[0].encode``, and the ``embeddings`` pipeline that ``bertkit serve`` runs), model2vec
(``StaticModel.encode``: in one process, and as it runs by default, in a process pool past 10,000 texts) and
sentence-transformers (``SentenceTransformer(DIR).encode``: its ``StaticEmbedding``), and bertkit's
all-MiniLM-L6-v2 in float32 encodes every ``--stride``-th of the same sentences (it is ~1,000x slower; the
sentences are benchmarks/embed.py's, so the sample has their length mix). Same threads for all (torch and the
Rust tokenizer's pool); the runs alternate round by round; medians, sentences/s and ratios.

With ``--serve``, also ``bertkit serve`` on the static model loaded by benchmarks/serve_speed.py's harness
(:func:`serve_speed.served`) against the model alone on the same texts.

    python benchmarks/static_speed.py [--model DIR] [--sentences 50000] [--stride 25] [--rounds 5] [--threads 2]
        [--batch-size 1024] [--serve] [--scenarios 48x1,1x32] [--serve-args "..."]
        [--json benchmarks/results/static_speed.json]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import record  # (benchmarks/record.py: result files; imported early, it takes the start's load)
from embed import agreement, minilm, sentences


def default_model(workdir: pathlib.Path) -> pathlib.Path:
    """A Model2Vec directory: all-MiniLM-L6-v2's tokenizer and a random ``[vocabulary, 256]`` table."""
    from model2vec import StaticModel
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(minilm() / "tokenizer.json"))
    table = np.random.default_rng(0).standard_normal((tokenizer.get_vocab_size(), 256)).astype(np.float32)
    StaticModel(table, tokenizer, normalize=True).save_pretrained(workdir / "static")
    return workdir / "static"


def runs(model: pathlib.Path, texts: list[str], sample: list[str], batch: int) -> dict[str, tuple]:
    """name -> (encode function, the texts it encodes)."""
    import model2vec
    import sentence_transformers

    import bertkit
    from bertkit.pipelines import pipeline
    from bertkit.sentence.static import load_static

    ours, normalize, _ = load_static(model)
    pipe = pipeline("embeddings", model=model, batch_size=batch)
    theirs = model2vec.StaticModel.from_pretrained(model)
    st = sentence_transformers.SentenceTransformer(str(model), device="cpu")
    dense = bertkit.SentenceTransformer(minilm(), dtype="fp32")
    return {
        "bertkit static encode": (lambda: ours.encode(texts, batch_size=batch, normalize=normalize), texts),
        "bertkit embeddings pipeline (what serve runs)": (lambda: pipe(texts), texts),
        "model2vec encode, one process": (
            lambda: theirs.encode(texts, batch_size=batch, use_multiprocessing=False), texts),
        "model2vec encode, default (process pool)": (lambda: theirs.encode(texts, batch_size=batch), texts),
        "sentence-transformers StaticEmbedding encode": (lambda: st.encode(texts, batch_size=batch), texts),
        "bertkit all-MiniLM-L6-v2 fp32 encode": (
            lambda: dense.encode(sample, batch_size=32, show_progress_bar=False), sample)}


def measure(table: dict[str, tuple], rounds: int) -> tuple[dict[str, list[float]], dict[str, np.ndarray]]:
    times: dict[str, list[float]] = {name: [] for name in table}
    vectors: dict[str, np.ndarray] = {}
    for _ in range(rounds):
        for name, (run, _) in table.items():
            start = time.perf_counter()
            vectors[name] = np.asarray(run(), dtype=np.float32)
            times[name].append(time.perf_counter() - start)
    return times, vectors


def speed_rows(table: dict[str, tuple], times: dict, vectors: dict) -> list[dict]:
    """Sentences/s per run, its ratio to bertkit MiniLM fp32 and to model2vec's best, and the vectors' distance
    from model2vec's (the MiniLM row has its own vectors)."""
    rate = {name: len(table[name][1]) / statistics.median(times[name]) for name in table}
    dense = rate["bertkit all-MiniLM-L6-v2 fp32 encode"]
    best_m2v = max(rate["model2vec encode, one process"], rate["model2vec encode, default (process pool)"])
    reference = vectors["model2vec encode, one process"]
    rows = []
    for name in table:
        static = name != "bertkit all-MiniLM-L6-v2 fp32 encode"
        _, diff = agreement(vectors[name], reference) if static else (None, None)
        rows.append({"run": name, "sentences": len(table[name][1]), "seconds": statistics.median(times[name]),
                     "sentences/s": rate[name], "x bertkit MiniLM fp32": rate[name] / dense,
                     "x model2vec (best)": rate[name] / best_m2v,
                     "max abs diff to model2vec": f"{diff:.1e}" if static else "-"})
    return rows


def serve_rows(model: pathlib.Path, args: argparse.Namespace) -> list[dict]:
    """``bertkit serve`` on the static model (serve_speed.py's harness and scenarios) and the model alone
    (its ``encode`` at the server's own batch, 64) on the same texts."""
    import serve_speed
    from serve_load import make_texts

    from bertkit.sentence.static import load_static

    served_args = serve_speed.parse_args(["--model", str(model), "--dtypes", "fp32", "--texts", str(args.serve_texts),
                                          "--threads", str(args.threads), "--scenarios", args.scenarios,
                                          "--py-spy", "", "--serve-args", args.serve_args])
    served_args.py_spy = None
    pairs = make_texts(minilm(), args.serve_texts, 3, 300, 0)  # passages of 3-300 MiniLM tokens
    module, normalize, _ = load_static(model)
    rows = serve_speed.served(served_args, "fp32", pairs, module.dim)
    sample = [text for text, _ in pairs]
    walls, cpus = [], []
    for _ in range(args.rounds):
        wall, cpu = time.perf_counter(), time.process_time()
        module.encode(sample, batch_size=64, normalize=normalize)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    alone = {"dtype": "fp32", "run": "model alone (load_static encode, batch 64)", "texts": len(sample),
             "texts/s": len(sample) / statistics.median(walls),
             "CPU ms/text": 1e3 * statistics.median(cpus) / len(sample), "p50 ms": None, "p99 ms": None,
             "load": round(os.getloadavg()[0], 2)}
    rows.append(alone)
    serve_speed.compare(rows)
    for row in rows:
        row.pop("profile", None)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=pathlib.Path, help="a static model directory (default: see the doc)")
    parser.add_argument("--sentences", type=int, default=50_000)
    parser.add_argument("--stride", type=int, default=25, help="MiniLM encodes every stride-th sentence")
    parser.add_argument("--batch-size", type=int, default=1024, help="the static runs' batch (model2vec's default)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--serve", action="store_true", help="also bertkit serve against the model alone")
    parser.add_argument("--serve-texts", type=int, default=4000)
    parser.add_argument("--scenarios", default="48x1,1x32", help="the server's loads: CLIENTSxTEXTS_PER_REQUEST")
    parser.add_argument("--serve-args", default="", help="extra arguments for bertkit serve")
    parser.add_argument("--json", type=pathlib.Path, help="write the tables here (benchmarks/record.py's format)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)  # the Rust tokenizer's pool, built when first used
    model = args.model or default_model(pathlib.Path(tempfile.mkdtemp()))
    texts = sentences(args.sentences)
    sample = texts[::args.stride]
    table = runs(model, texts, sample, args.batch_size)
    times, vectors = measure(table, args.rounds)
    words = statistics.mean(len(t.split()) for t in texts)
    title = (f"static model {model.name} ({vectors['bertkit static encode'].shape[1]} dims), {args.threads} threads, "
             f"{len(texts):,} sentences ({words:.1f} words on average; MiniLM every {args.stride}th: "
             f"{len(sample):,}), static batch {args.batch_size}, MiniLM batch 32, medians of {args.rounds}")
    print(f"torch {torch.__version__}, {title}, load {os.getloadavg()[0]:.2f}\n")
    rows = speed_rows(table, times, vectors)
    print(record.markdown(rows, list(rows[0])))
    tables = [record.table(title, rows)]
    if args.serve:
        served = serve_rows(model, args)
        columns = ["run", "texts", "texts/s", "x model alone", "CPU ms/text", "CPU x model alone", "p50 ms",
                   "p99 ms", "load"]
        print("\n" + record.markdown(served, columns))
        tables.append(record.table(f"bertkit serve on {model.name} against the model alone, {args.threads} threads, "
                                   f"{args.serve_texts} passages of 3-300 tokens", served, columns))
    if args.json:
        record.write_result(args.json, "static_speed", tables,
                            title="A static model's encode, model2vec's, sentence-transformers' (static_speed.py)")


if __name__ == "__main__":
    main()
