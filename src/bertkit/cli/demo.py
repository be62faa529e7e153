"""``bertkit demo``: pretrain a small BERT on Jane Austen's novels (bundled) in about five minutes.

Uses the ``tiny`` size's recipe (``bertkit.presets.RECIPES``, the same defaults as
``bertkit pretrain --text ... --model tiny``). Learns a WordPiece vocabulary, builds Google-style
NSP instances, pretrains with the training engine (bf16 where the CPU has it, MLM projected only
at masked positions; a GPU is used when present), then reports held-out MLM accuracy at ``[MASK]``
positions and at every selected position (Google's metric), each beside the unigram baseline,
NSP accuracy beside chance, and fill-mask predictions. Everything lands in ``--output`` (default ``runs/demo``).
"""

from __future__ import annotations

import time
from pathlib import Path

from bertkit.cli import ArgumentParser

SENTENCES = (
    "it is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a [MASK].",
    "she was not [MASK] to see him again.",
    "i have not the pleasure of [MASK] you.",
    "mr. darcy [MASK] to the door.",
)


def run(output: str = "runs/demo", budget_s: float = 330.0, max_steps: int | None = None) -> dict:
    import torch

    from bertkit import BERTForMaskedLM, BERTTokenizerFast
    from bertkit.presets import RECIPES, SIZES
    from bertkit.resources import austen_files
    from bertkit.tasks.pretraining import pretrain_from_text
    from bertkit.training import TrainingConfig, cpu_supports_bf16

    out = _fresh(Path(output))
    files = austen_files()
    r, (layers, hidden, _) = RECIPES["tiny"], SIZES["tiny"]
    gpu = torch.cuda.is_available()
    precision = "bf16" if gpu or cpu_supports_bf16() else "fp32"
    print(f"bertkit demo: pretraining a BERT (L={layers}, H={hidden}) on Jane Austen's six novels; "
          f"device={'cuda' if gpu else 'cpu'} precision={precision}; output in {out}/")
    start = time.perf_counter()

    def stop_at_budget(trainer) -> None:  # a slower machine ends early instead of running long
        if time.perf_counter() - start > budget_s:
            trainer.should_stop = True

    training = TrainingConfig(max_steps=max_steps or r.max_steps, batch_size=r.batch_size,
                              learning_rate=r.learning_rate, warmup_ratio=r.warmup_ratio, precision=precision,
                              log_every=100, device="auto")
    result = pretrain_from_text(files, out, model="tiny", vocab_size=r.vocab_size, max_seq_length=r.max_seq_length,
                                masked_lm_prob=r.masked_lm_prob, next_sentence_prediction=r.next_sentence_prediction,
                                training=training, progress=False,
                                callbacks={"on_step_end": stop_at_budget})
    ev = result.evaluation
    pairs = f", {ev['nsp_examples']} pairs" if "nsp_examples" in ev else ""
    print(f"\nheld-out evaluation ({ev['selected_positions']} predicted positions{pairs}; "
          f"unigram baseline = always '{ev['unigram_token']}'):")
    rows = (("MLM accuracy at [MASK] positions", ev["mlm_accuracy_masked"], ev["unigram_accuracy_masked"], "unigram"),
            ("MLM accuracy at all selected positions", ev["mlm_accuracy_selected"], ev["unigram_accuracy_selected"],
             "unigram"),
            ("NSP accuracy", ev.get("nsp_accuracy"), ev.get("nsp_chance"), "chance"))
    for name, value, baseline, what in rows:
        if value is None:  # NSP is not trained in the tiny recipe
            continue
        print(f"  {name:<40} {value:6.1%}   {what} {baseline:6.1%}   ratio {value / baseline:4.2f}x")
    tokenizer = BERTTokenizerFast.from_pretrained(result.model_dir)
    model = BERTForMaskedLM.from_pretrained(result.model_dir, warn=False)  # the pretraining heads drop, as meant
    print("\nfill-mask:")
    for sentence in SENTENCES:
        top = model.fill_mask(tokenizer, sentence, top_k=3)[0]
        print(f"  {sentence}\n      -> " + ", ".join(f"{token} ({p:.2f})" for token, p in top))
    print(f"\nwall time {time.perf_counter() - start:.0f} s")
    print(f"model + tokenizer: {result.model_dir}\nmetrics: {result.metrics_path}"
          + (f"\nplot: {result.plot_path}" if result.plot_path else "\nplot: install matplotlib (pip install "
             "'bertkit[plot]') for metrics.png"))
    print(f"next: bertkit predict fill-mask {result.model_dir} \"Emma was [MASK].\"   or   "
          f"bertkit serve {result.model_dir}   (then open http://127.0.0.1:8080/)")
    return ev


def _fresh(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3``... : never reuse (or overwrite) an existing run."""
    candidate, n = path, 1
    while candidate.exists() and any(candidate.iterdir()):
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit demo", description=__doc__)
    parser.add_argument("-o", "--output", default="runs/demo")
    parser.add_argument("--budget", type=float, default=330.0, help="seconds (from the start) before training stops")
    parser.add_argument("--max-steps", type=int, default=None)
    args = parser.parse_args(argv)
    run(args.output, args.budget, args.max_steps)
    return 0
