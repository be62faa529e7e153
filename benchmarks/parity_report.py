"""Max abs difference vs HF transformers, per head: outputs (valid positions) and losses, fp32, CPU.

    python benchmarks/parity_report.py

Uses the same builders as tests/test_hf_parity.py (tests/reference.py): random weights
written by HF's ``save_pretrained`` and loaded with bertkit's ``from_pretrained``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from reference import CASES, IMPLEMENTATIONS, build, compare, max_abs_diff


def main() -> None:
    header = f"{'head':<20}" + "".join(f"{impl + ' outputs':>16}{impl + ' loss':>14}" for impl in IMPLEMENTATIONS)
    print(header)
    print("-" * len(header))
    worst = 0.0
    for case in CASES.values():
        cells = []
        for impl in IMPLEMENTATIONS:
            with tempfile.TemporaryDirectory() as directory:
                outputs, losses = compare(build(case, directory, impl, source="hf"))
            out, loss = max_abs_diff(outputs), max_abs_diff(losses)
            worst = max(worst, out, loss if losses else 0.0)
            cells.append(f"{out:>16.2e}{(f'{loss:.2e}' if losses else '-'):>14}")
        print(f"{case.id:<20}" + "".join(cells))
    print(f"\nworst: {worst:.2e} (tests require <= 1e-5 absolute + 1e-5 relative)")


if __name__ == "__main__":
    main()
