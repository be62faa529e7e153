"""``bertkit distill static MODEL -o OUT``: a static model (one vector per token) distilled from an embedding model.

Every token of MODEL's vocabulary goes through MODEL alone between its special tokens and is pooled as MODEL
pools; the table is reduced by PCA to --dim dimensions and each row weighted by its token's estimated frequency
(--weighting: sif, as model2vec; zipf; none). --vocabulary FILE (a word a line) or --corpus FILES (the most
frequent words MODEL's vocabulary lacks) add whole words to the tokenizer. OUT loads in bertkit
(``bertkit.StaticModel``), model2vec (``StaticModel.from_pretrained``) and sentence-transformers
(``SentenceTransformer``). See :mod:`bertkit.sentence.distill` for the formulas.

    bertkit distill static all-MiniLM-L6-v2/ -o minilm-static --dim 256
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bertkit.cli import ArgumentParser

#: --dim when PCA runs and none is given: model2vec's default
DEFAULT_DIM = 256


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit distill", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="kind", required=True)
    static = sub.add_parser("static", help="a static (Model2Vec-style) token table distilled from MODEL",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    static.add_argument("model", metavar="MODEL", help="a sentence-transformers directory or any BERT bertkit loads")
    static.add_argument("-o", "--output", required=True, help="directory for the static model")
    static.add_argument("--dim", type=int, help="dimensions after PCA (default 256; at most MODEL's)")
    static.add_argument("--no-pca", dest="pca", action="store_false",
                        help="keep MODEL's dimensions and axes (then --dim is MODEL's or left out)")
    static.add_argument("--pca", dest="pca", action="store_true", help="reduce with PCA (the default)")
    static.set_defaults(pca=True)
    static.add_argument("--weighting", choices=("sif", "zipf", "none"), default="sif",
                        help="per-token weight from its frequency rank r: sif a/(a+p(r)), zipf log(1+r), none")
    static.add_argument("--sif-coefficient", type=float, default=1e-4, help="SIF's a (default 1e-4)")
    words = static.add_mutually_exclusive_group()
    words.add_argument("--vocabulary", metavar="FILE", help="whole words to add to the vocabulary, one a line, "
                                                            "most frequent first")
    words.add_argument("--corpus", nargs="+", metavar="FILE", help="text or .jsonl files: their most frequent "
                                                                   "words MODEL's vocabulary lacks are added")
    static.add_argument("--corpus-words", type=int, default=20000,
                        help="how many words --corpus adds at most (default 20000; each seen twice or more)")
    static.add_argument("--batch-size", type=int, default=4096, help="tokens per forward pass of MODEL (default "
                                                                     "4096)")
    args = parser.parse_args(argv)
    from bertkit.sentence.distill import DistillSettings, distill_static

    dim = args.dim if args.dim is not None else DEFAULT_DIM if args.pca else None
    settings = DistillSettings(dim=dim, pca=args.pca, weighting=args.weighting,
                               sif_coefficient=args.sif_coefficient, words=tuple(_words(args, args.model)),
                               batch_size=args.batch_size)
    start = time.perf_counter()
    out = distill_static(args.model, args.output, settings, progress=sys.stderr.isatty())
    print(f"distilled {args.model} in {time.perf_counter() - start:.1f} s: {out}", file=sys.stderr)
    return 0


def _words(args, model: str) -> list[str]:
    """The words to add: --vocabulary's lines, or --corpus's most frequent new words."""
    from bertkit.data.corpus import read_documents

    if args.vocabulary:  # one word a line: google's layout reads each line as it is (blank lines skipped)
        return [line.strip() for document in read_documents([Path(args.vocabulary)], format="google")
                for line in document if line.strip()]
    if not args.corpus:
        return []
    from bertkit.sentence.distill import corpus_words
    from bertkit.tokenization import load_tokenizer

    backend = load_tokenizer(model).backend_tokenizer
    return corpus_words(backend, read_documents([Path(f) for f in args.corpus]), args.corpus_words)
