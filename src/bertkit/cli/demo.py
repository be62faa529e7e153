"""``bertkit demo``: pretrain a small BERT on Jane Austen's novels (bundled) within a time budget (default 10 minutes).

Uses the ``tiny`` size's recipe (``bertkit.presets.RECIPES``, the same defaults as ``bertkit pretrain --text ...
--model tiny``: masked-LM alone on contiguous text, no NSP). It first times a few training steps on this machine (on
a CPU with all threads and with one, keeping the faster: on a busy machine threads spin waiting for each other),
then plans the run to end within ``--budget`` seconds of wall time and prints one line saying which plan and why:
the whole recipe when it fits; else the steps that fit, with the learning-rate schedule warming up and decaying
over those steps, or smaller batches where :data:`MIN_STEPS` lists one that learns; and on a machine too slow,
the steps that fit, saying that they are too few to learn past the unigram baseline. Training is never cut short:
when the machine slows down mid-run the planned steps still finish and the demo says by how much it exceeded the
budget (also in ``evaluation.json``'s ``"demo"`` entry). It learns a WordPiece vocabulary, pretrains with the
training engine (``--precision auto``: bf16 where the CPU has it; a GPU is used when present), then reports
held-out MLM accuracy at ``[MASK]`` positions and at every selected position (Google's metric), each beside the
unigram baseline, and fill-mask predictions. Everything lands in ``--output`` (default ``runs/demo``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from bertkit.cli import ArgumentParser

SENTENCES = (
    "it is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a [MASK].",
    "she was not [MASK] to see him again.",
    "i have not the pleasure of [MASK] you.",
    "mr. darcy [MASK] to the door.",
)

PRECISIONS = ("auto", "fp32", "bf16")

#: batch size -> the fewest steps (learning-rate schedule over those steps, the recipe's other settings) known to
#: reach 2x the unigram baseline at [MASK] positions on the held-out chapters, tried in this order. Measured: 1,000
#: steps of 32 (or of 16) stay on the unigram plateau (1.01x, 1.02x; so do 800 of 32 and 1,600 of 16 at a peak lr
#: of 4e-3 with every selected token [MASK]); the recipe's 3,500 of 32 reach 3.6x (2 idle cores, bf16) and 3.64x
#: (one busy core, fp32); between them is unmeasured, and no smaller batch is known to learn, so none is listed.
MIN_STEPS: dict[int, int] = {32: 3500}

#: wall time outside training (data preparation, evaluation, fill-mask, saving), counted in training steps of the
#: recipe's batch at the measured speed: data preparation took about 65 of them on one busy core
OVERHEAD_STEPS = 100

#: the share of the remaining budget planned for training: the rest absorbs a machine that slows down a little
HEADROOM = 0.9


@dataclass(frozen=True)
class Plan:
    """What the demo trains: ``steps`` optimizer steps of ``batch_size`` sequences at ``seconds_per_step`` (measured).

    ``kind`` is ``"recipe"`` (the recipe's own steps fit), ``"fewer steps"``, ``"smaller batch"``,
    ``"too short"`` (the budget allows fewer steps than learn past the unigram baseline) or ``"given"``
    (``--max-steps``).
    """

    steps: int
    batch_size: int
    seconds_per_step: float
    kind: str

    @property
    def seconds(self) -> float:
        return self.steps * self.seconds_per_step


def plan_training(train_s: float, seconds_per_step: Mapping[int, float] | Callable[[int], float],
                  recipe_steps: int = 3500, recipe_batch: int = 32, min_steps: Mapping[int, int] = MIN_STEPS) -> Plan:
    """The plan whose training fits ``train_s`` seconds, given the measured seconds per step of each batch size.

    ``seconds_per_step`` maps a batch size to its measured seconds per step (a mapping, or a function that
    measures it on demand: only the batch sizes the plan needs are asked). The recipe's own steps when they
    fit; else, batch size by batch size (``min_steps``' order), as many steps as fit once they are at least
    that batch size's ``min_steps``; else the cheapest batch size's steps that fit (at least 1), ``"too short"``.
    """
    speed = seconds_per_step.__getitem__ if isinstance(seconds_per_step, Mapping) else seconds_per_step
    first = speed(recipe_batch)
    if recipe_steps * first <= train_s:
        return Plan(recipe_steps, recipe_batch, first, "recipe")
    plan = None
    for batch, fewest in min_steps.items():
        per_step = first if batch == recipe_batch else speed(batch)
        plan = Plan(max(1, int(train_s / per_step)), batch, per_step,
                    "fewer steps" if batch == recipe_batch else "smaller batch")
        if plan.steps >= fewest:
            return plan
    return Plan(plan.steps, plan.batch_size, plan.seconds_per_step, "too short")


def describe(plan: Plan, budget_s: float, recipe_steps: int, recipe_batch: int, seq: int) -> str:
    """The one line saying what the demo runs and why."""
    shape = f"{plan.steps:,} steps of {plan.batch_size} x {seq} tokens"
    machine = f"machine: {plan.seconds_per_step:.3f} s/step at batch {plan.batch_size}"
    if plan.kind == "given":
        return f"{machine}; running {shape} (--max-steps), about {plan.seconds:.0f} s of training, no budget planning"
    if plan.kind == "recipe":
        return f"{machine}; running the tiny recipe to the end ({shape}, about {plan.seconds:.0f} s) within the " \
               f"{budget_s:.0f} s budget"
    full = f"the recipe's {recipe_steps:,} x {recipe_batch} would take about " \
           f"{recipe_steps * plan.seconds_per_step * recipe_batch / plan.batch_size:.0f} s"
    if plan.kind == "too short":
        fewest = MIN_STEPS.get(plan.batch_size, recipe_steps)
        return f"{machine}; the {budget_s:.0f} s budget is too short to learn past the unigram baseline (that takes " \
               f"about {fewest:,} steps, {fewest * plan.seconds_per_step:.0f} s of training here); running {shape} " \
               "anyway: expect about unigram accuracy, or give a larger --budget"
    return f"{machine}; {full}, so running {shape} (learning-rate schedule over these steps) to fit the " \
           f"{budget_s:.0f} s budget"


def measure_seconds_per_step(batch_size: int, seq_length: int, vocab_size: int, masked_lm_prob: float,
                             precision: str, device, steps: int = 6, warmup: int = 2) -> float:
    """Seconds per training step of the ``tiny`` model on this machine: ``warmup`` untimed steps, then ``steps``
    timed ones, on random tokens shaped as the recipe's batches (forward, backward, clipping, fused AdamW, as
    the Trainer does). The model is a throwaway: the run itself starts from its seeded initialisation."""
    import torch

    from bertkit import BERTForPreTraining
    from bertkit.presets import preset_config
    from bertkit.training import TrainingConfig, build_optimizer
    from bertkit.training.evaluation import autocast

    generator = torch.Generator().manual_seed(0)
    model = BERTForPreTraining(preset_config("tiny", vocab_size=vocab_size)).to(device).train()
    optimizer = build_optimizer(model, TrainingConfig(max_steps=1, learning_rate=1e-4))
    shape = (batch_size, seq_length)
    input_ids = torch.randint(5, vocab_size, shape, generator=generator)
    labels = torch.where(torch.rand(shape, generator=generator) < masked_lm_prob, input_ids, -100)
    batch = {name: tensor.to(device) for name, tensor in (
        ("input_ids", input_ids), ("attention_mask", torch.ones(shape, dtype=torch.long)),
        ("token_type_ids", torch.zeros(shape, dtype=torch.long)), ("mlm_labels", labels))}

    def step() -> None:
        with autocast(device, precision):
            loss, _ = model.training_step(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.detach().item()  # waits for a GPU

    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps


def fastest_threads(measure: Callable[[], float]) -> tuple[int, float, dict[int, float]]:
    """On a CPU, the thread count whose training steps run faster here now, all of them or one, and its seconds
    per step (``measure()`` times steps under the current setting, which is left at the choice): on a busy machine
    threads can wait on each other so long that one alone is faster (seen: 1.2 s/step on 2 threads, 0.42 on 1).
    Returns ``(threads, seconds, {threads: seconds measured})``."""
    import torch

    everything = torch.get_num_threads()
    timed = {everything: measure()}
    if everything > 1:
        torch.set_num_threads(1)
        timed[1] = measure()
    threads = min(timed, key=timed.get)
    torch.set_num_threads(threads)
    return threads, timed[threads], timed


def run(output: str = "runs/demo", budget_s: float = 600.0, max_steps: int | None = None,
        precision: str = "auto") -> dict:
    """Plan, pretrain, evaluate and print; returns the held-out evaluation with the plan under ``"demo"``."""
    start = time.perf_counter()
    import torch

    from bertkit import BERTForMaskedLM, BERTTokenizerFast
    from bertkit.io import atomic_write_text
    from bertkit.presets import RECIPES, SIZES
    from bertkit.resources import austen_files
    from bertkit.tasks.pretraining import EVALUATION_FILE, pretrain_from_text
    from bertkit.training import TrainingConfig, resolve_precision

    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}.")
    out = _fresh(Path(output))
    files = austen_files()
    r, (layers, hidden, _) = RECIPES["tiny"], SIZES["tiny"]
    gpu = torch.cuda.is_available()
    device = torch.device("cuda" if gpu else "cpu")
    asked, precision = precision, resolve_precision(precision, device)  # the Trainer resolves `asked` alike
    speeds: dict[int, float] = {}
    if device.type == "cpu":  # the thread count first: every later measurement and the run use it
        def recipe_speed() -> float:
            return measure_seconds_per_step(r.batch_size, r.max_seq_length, r.vocab_size, r.masked_lm_prob,
                                            precision, device)

        threads, speeds[r.batch_size], timed = fastest_threads(recipe_speed)
        chosen = ", ".join(f"{n} thread{'s' if n > 1 else ''} {t:.3f} s/step" for n, t in sorted(timed.items()))
        print(f"bertkit demo: threads measured ({chosen}): using {threads}")
    print(f"bertkit demo: pretraining a BERT (L={layers}, H={hidden}) on Jane Austen's six novels; "
          f"device={device.type} precision={precision} threads={torch.get_num_threads()}; output in {out}/")

    def speed(batch: int) -> float:  # measured only for the batch sizes the plan considers
        if batch not in speeds:
            speeds[batch] = measure_seconds_per_step(batch, r.max_seq_length, r.vocab_size, r.masked_lm_prob,
                                                     precision, device)
        return speeds[batch]

    if max_steps is not None:
        plan = Plan(max_steps, r.batch_size, speed(r.batch_size), "given")
    else:
        overhead = OVERHEAD_STEPS * speed(r.batch_size)
        train_s = HEADROOM * (budget_s - (time.perf_counter() - start) - overhead)
        plan = plan_training(train_s, speed, r.max_steps, r.batch_size)
    print(describe(plan, budget_s, r.max_steps, r.batch_size, r.max_seq_length), flush=True)

    clock: dict[str, float] = {}

    def mark(event: str) -> Callable:
        return lambda trainer: clock.__setitem__(event, time.perf_counter())

    training = TrainingConfig(max_steps=plan.steps, batch_size=plan.batch_size, learning_rate=r.learning_rate,
                              warmup_ratio=r.warmup_ratio, precision=asked, log_every=100, device="auto")
    result = pretrain_from_text(files, out, model="tiny", vocab_size=r.vocab_size, max_seq_length=r.max_seq_length,
                                masked_lm_prob=r.masked_lm_prob, next_sentence_prediction=r.next_sentence_prediction,
                                training=training, progress=False,
                                callbacks={"on_train_begin": mark("train_begin"), "on_train_end": mark("train_end")})
    train_s = clock["train_end"] - clock["train_begin"]
    ev = result.evaluation
    print(f"\nheld-out evaluation ({ev['selected_positions']} predicted positions; "
          f"unigram baseline = always '{ev['unigram_token']}'):")
    rows = (("MLM accuracy at [MASK] positions", ev["mlm_accuracy_masked"], ev["unigram_accuracy_masked"]),
            ("MLM accuracy at all selected positions", ev["mlm_accuracy_selected"], ev["unigram_accuracy_selected"]))
    for name, value, baseline in rows:
        print(f"  {name:<40} {value:6.1%}   unigram {baseline:6.1%}   ratio {value / baseline:4.2f}x")
    print(f"  {'cross-entropy at selected positions':<40} {ev['mlm_loss_selected']:6.3f}   unigram "
          f"{ev['unigram_loss_selected']:6.3f}   (nats; lower is better)")
    tokenizer = BERTTokenizerFast.from_pretrained(result.model_dir)
    model = BERTForMaskedLM.from_pretrained(result.model_dir, warn=False)  # the pretraining heads drop, as meant
    print("\nfill-mask:")
    for sentence in SENTENCES:
        top = model.fill_mask(tokenizer, sentence, top_k=3)[0]
        print(f"  {sentence}\n      -> " + ", ".join(f"{token} ({p:.2f})" for token, p in top))
    wall = time.perf_counter() - start
    report = {**asdict(plan), "budget_s": budget_s, "precision": precision, "wall_s": round(wall, 1),
              "training_s": round(train_s, 1), "measured_seconds_per_step": round(train_s / plan.steps, 4),
              "within_budget": wall <= budget_s}
    ev = {**ev, "demo": report}
    atomic_write_text(result.output_dir / EVALUATION_FILE, json.dumps(ev, indent=2) + "\n")
    print(f"\n{_timing(report, clock['train_begin'] - start)}")
    plot = (f"{result.plot_path} (loss, and MLM accuracy at all selected positions as in the second row above, on "
            "training batches and held-out, averaged over batches)" if result.plot_path
            else "install matplotlib (pip install 'bertkit[plot]') for metrics.png")
    print(f"model + tokenizer: {result.model_dir}\nmetrics: {result.metrics_path}\nplot: {plot}")
    print(f"next: bertkit predict fill-mask {result.model_dir} \"Emma was [MASK].\"   or   "
          f"bertkit serve {result.model_dir}   (then open http://127.0.0.1:8080/)")
    return ev


def _timing(report: dict, before_training_s: float) -> str:
    """The closing line: wall time against the budget, and why it was exceeded when it was."""
    line = (f"wall time {report['wall_s']:.0f} s (measuring and data {before_training_s:.0f} s, {report['steps']:,} "
            f"steps {report['training_s']:.0f} s at {report['measured_seconds_per_step']:.3f} s/step)")
    if report["kind"] == "given" or report["within_budget"]:
        return line + ("" if report["kind"] == "given" else f", within the {report['budget_s']:.0f} s budget")
    slower = report["measured_seconds_per_step"] / report["seconds_per_step"]
    return (f"{line}: exceeded the {report['budget_s']:.0f} s budget by {report['wall_s'] - report['budget_s']:.0f} s "
            f"(steps ran {slower:.1f}x slower than measured at the start); all planned steps were run")


def _fresh(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3``... : never reuse (or overwrite) an existing run."""
    candidate, n = path, 1
    while candidate.exists() and any(candidate.iterdir()):
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit demo", description=__doc__)
    parser.add_argument("-o", "--output", default="runs/demo", help="the run directory (default runs/demo)")
    parser.add_argument("--budget", type=float, default=600.0,
                        help="seconds of wall time the run is planned to fit (default 600)")
    parser.add_argument("--precision", choices=PRECISIONS, default="auto",
                        help="auto: bf16 on a GPU or a CPU with native bf16, else fp32")
    parser.add_argument("--max-steps", type=int, default=None, help="train this many steps, without planning")
    args = parser.parse_args(argv)
    run(args.output, args.budget, args.max_steps, args.precision)
    return 0
