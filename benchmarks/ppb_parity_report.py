"""Max abs differences between bertkit and pytorch-pretrained-bert 0.6.2, one line per head.

Each ppb model is built on the tiny test config with random weights, archived as ppb
writes it (``--legacy-names``: with the 2018 LayerNorm ``gamma``/``beta`` names), loaded
by the matching bertkit class, and run on one padded batch with mixed token types; the
outputs are compared at non-padded positions and the losses after converting ppb's label
conventions. The builders are those of ``tests/test_ppb_parity.py`` (``tests/ppb_reference.py``).

    .venv/bin/python benchmarks/ppb_parity_report.py [--legacy-names]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from ppb_reference import ATTN_IMPLEMENTATIONS, HEADS, max_differences


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--legacy-names", action="store_true",
                        help="archive the LayerNorms as gamma/beta, as 2018-era checkpoints did")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    args = parser.parse_args(argv)

    print(f"{'head':<26}{'attn':<7}{'max|d output|':>15}{'|d loss|':>12}  worst output")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name, head in HEADS.items():
            for attn in ATTN_IMPLEMENTATIONS:
                d = max_differences(head, Path(tmp) / f"{name}-{attn}", attn, legacy_names=args.legacy_names,
                                    seed=args.seed)
                out_name, out = max(d.outputs.items(), key=lambda kv: kv[1])
                loss = "-" if d.loss is None else f"{d.loss:.2e}"
                print(f"{name:<26}{attn:<7}{out:>15.2e}{loss:>12}  {out_name}")
                worst = max(worst, out, d.loss or 0.0)
    print(f"worst difference: {worst:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
