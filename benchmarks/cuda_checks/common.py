"""What every section of ``cuda_check.py`` shares: sizes, the report (markdown tables printed and kept in
``--out DIR/cuda_check.md``), random padded inputs, HF / bertkit copies of one random BERT, the SDPA op probe.

A section is a function ``(args, device, workdir) -> None`` that prints its tables with :func:`table` and raises
where a check fails (:func:`section` records the traceback and goes on with the next section).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from record import markdown  # the benchmarks' one table format
from timing import spread_mask

from conftest import randomize_  # the suite's: every parameter random, LayerNorms near 1

BASE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
#: ``--quick``'s stand-in for BERT-base
QUICK_BASE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96)
#: hidden 36 with 3 heads (head dim 12), inner 37, vocab 99, 3 token types (as tests/conftest.py's TINY)
ODD = dict(vocab_size=99, hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=37,
           max_position_embeddings=40, type_vocab_size=3)
SMALL_PRETRAIN = dict(vocab_size=512, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                      intermediate_size=1024, max_position_embeddings=128)
#: ``--quick``'s stand-in for SMALL_PRETRAIN
QUICK_PRETRAIN = dict(SMALL_PRETRAIN, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SPECIAL = dict(pad_token_id=0, unk_token_id=1, cls_token_id=2, sep_token_id=3, mask_token_id=4)


# ---------------------------------------------------------------------------- the report
#: what :func:`record` printed, rewritten to ``REPORT_FILE`` (``--out DIR``) after each addition
REPORT: list[str] = []
REPORT_FILE: Path | None = None
#: ``"what: why"`` of each check this run left out (the CPU smoke run: those that need CUDA), listed at the end
SKIPPED: list[str] = []


def record(text: str, *, replacing: str | None = None, echo: bool = True) -> None:
    """Print ``text`` (unless not ``echo``) and keep it in the report file, rewritten whole (temp + rename) so that
    a run killed at any point leaves a complete file of what it had. ``replacing``: the last entry that starts
    with it is replaced by ``text`` (where there is none, ``text`` is added)."""
    if echo:
        print(text, flush=True)
    earlier = [i for i, entry in enumerate(REPORT) if replacing is not None and entry.startswith(replacing)]
    if earlier:
        REPORT[earlier[-1]] = text
    else:
        REPORT.append(text)
    if REPORT_FILE is not None:
        temporary = REPORT_FILE.with_name(REPORT_FILE.name + ".tmp")
        temporary.write_text("\n".join(REPORT) + "\n", encoding="utf-8")
        os.replace(temporary, REPORT_FILE)


def table(title: str, rows: list[dict], columns: list[str] | None = None, *, partial: bool = False) -> None:
    """A markdown table under ``title``, printed and in the report. ``partial``: the rows so far, in the report
    file only (a run killed later still leaves them), replaced by the next call with the same title."""
    head = f"\n### {title}\n\n"
    text = head + (markdown(rows, columns) if rows else "(no rows)")
    record(text + ("\n\n(rows so far: the section was still running)" if partial else ""), replacing=head,
           echo=not partial)


def skip(what: str, why: str) -> None:
    """Record that ``what`` did not run and ``why`` (kept in :data:`SKIPPED` for the run's last lines)."""
    SKIPPED.append(f"{what}: {why}")
    record(f"skipped: {what} ({why})")


#: a failed run's cell (its traceback is in the report)
FAILED = "FAILED (see its traceback)"


@contextlib.contextmanager
def failure_noted(row: dict, column: str, what: str) -> Iterator[None]:
    """Run one row's measurement; where it raises, ``row[column]`` says :data:`FAILED` and the report gets the
    traceback under ``what``, and the section goes on (one run's failure must not hide the others')."""
    try:
        yield
    except Exception:
        row[column] = FAILED
        record(f"{what} FAILED:\n{traceback.format_exc()}")


def section(name: str, fn: Callable[[], None], failures: list[str]) -> None:
    record(f"\n## {name}\n")
    start = time.perf_counter()
    try:
        fn()
    except Exception:  # one broken section must not hide the others' numbers
        failures.append(name)
        record(f"SECTION {name} FAILED:\n{traceback.format_exc()}")
    record(f"\n({name}: {time.perf_counter() - start:.1f} s)")


# ---------------------------------------------------------------------------- devices and inputs
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def padded_inputs(batch: int, length: int, vocab: int, types: int, real: float, seed: int = 0):
    """Random ids (>= 5: no special id), mixed token types, rows of spread lengths (mean ``real``)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (batch, length), generator=g)
    token_types = torch.randint(0, types, (batch, length), generator=g)
    mask = spread_mask(batch, length, real, minimum=2)
    ids[mask == 0] = 0
    token_types[mask == 0] = 0
    return ids, mask, token_types


# ---------------------------------------------------------------------------- one random BERT, two libraries
def hf_and_bertkit(cfg: dict, workdir: Path, *, std: float | None, seed: int = 0):
    """HF ``BertModel`` with random weights written by ``save_pretrained``; a loader of bertkit / HF copies of it."""
    import transformers

    import bertkit

    torch.manual_seed(seed)
    hf = transformers.BertModel(transformers.BertConfig(**cfg, hidden_dropout_prob=0.0,
                                                        attention_probs_dropout_prob=0.0))
    if std is not None:
        randomize_(hf, seed, std)
    path = workdir / f"hf-{cfg['hidden_size']}-{cfg['num_hidden_layers']}"
    hf.save_pretrained(path)

    def load(side: str, impl: str, dtype: torch.dtype, device: torch.device):
        if side == "hf":
            model = transformers.BertModel.from_pretrained(path, attn_implementation=impl)
            if model.config._attn_implementation != impl:
                raise RuntimeError(f"HF runs {model.config._attn_implementation!r}, not {impl!r}")
            return model.to(device=device, dtype=dtype).eval()
        model = bertkit.BERT.from_pretrained(path, attn_implementation=impl).eval()
        return bertkit.optimize_for_inference(model, dtype=None if dtype == torch.float32 else dtype, device=device)

    return load


def run_hf(model, ids, mask, types):
    out = model(input_ids=ids, attention_mask=mask, token_type_ids=types)
    return out.last_hidden_state, out.pooler_output


def hf_last_hidden(model, ids, mask, types=None):
    """HF's backbone of any family (one without token types or a pooler too): the last hidden state."""
    return model(input_ids=ids, attention_mask=mask).last_hidden_state


def run_ours(model, ids, mask, types):
    seq, pooled = model(ids, mask, types)[:2]
    return seq, pooled


# ---------------------------------------------------------------------------- which SDPA kernel ran
SDPA_OPS = {"flash": "_scaled_dot_product_flash_attention", "mem-efficient": "_scaled_dot_product_efficient_attention",
            "cudnn": "_scaled_dot_product_cudnn_attention", "math": "_scaled_dot_product_attention_math"}


def sdpa_ops(fn: Callable[[], object]) -> str:
    """The SDPA implementations (aten op names) that ``fn`` dispatched to, per the profiler (the CPU's flash kernel
    is ``..._flash_attention_for_cpu``)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    names = {e.key for e in prof.key_averages()}
    found = [short for short, op in SDPA_OPS.items()
             if any(n.endswith((op, f"{op}_for_cpu")) or n == f"aten::{op}" for n in names)]
    if not found and any("matmul" in n or n == "aten::bmm" for n in names):
        found = ["(no SDPA op: matmul + softmax)"]
    return ", ".join(found) or "none"
