"""``bertkit fill-mask MODEL_DIR "text with [MASK]" [--top-k 5]``: the likeliest tokens for each mask.

The mask is the model's own mask token: ``[MASK]`` for BERT, DistilBERT and ELECTRA, ``<mask>`` for RoBERTa,
XLM-RoBERTa, MPNet (and ModernBERT's tokenizer names its own)."""

from __future__ import annotations

from bertkit.cli import ArgumentParser, add_dtype_argument


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit fill-mask", description=__doc__)
    parser.add_argument("model", help="a directory holding a BERT with an MLM head and its tokenizer")
    parser.add_argument("text", nargs="+", help="texts containing the model's mask token ([MASK], <mask>, ...)")
    parser.add_argument("--top-k", type=int, default=5, help="predictions per mask token (default 5)")
    add_dtype_argument(parser)
    args = parser.parse_args(argv)

    from bertkit import BERTForMaskedLM
    from bertkit.inference.finite import check_value
    from bertkit.inference.precision import prepare
    from bertkit.tokenization import load_tokenizer

    tokenizer = load_tokenizer(args.model)
    model = BERTForMaskedLM.from_pretrained(args.model, warn=False)  # a pretraining run's NSP head drops, as meant
    prepare(model, args.dtype, "fill-mask")
    for number, text in enumerate(args.text, 1):
        masks = check_value(model.fill_mask(tokenizer, text, top_k=args.top_k), f"TEXT {number}")
        print(text)
        for i, candidates in enumerate(masks):
            shown = "  ".join(f"{token} {probability:.3f}" for token, probability in candidates)
            print(f"  {tokenizer.mask_token} {i + 1}: {shown}")
    return 0
