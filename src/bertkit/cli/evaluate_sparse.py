"""``bertkit evaluate``'s sparse side: a sparse encoder on --beir alone, or beside a dense model and fused with it
(--sparse-model, --fusion). The flags and what they do are documented in :mod:`bertkit.cli.evaluate`."""

from __future__ import annotations

import argparse
import json
import sys

from bertkit.retrieval.fusion import FUSIONS

#: the flags only a sparse evaluation takes, with the attribute each sets
SPARSE_ONLY = {"--sparse-model": "sparse_model", "--fusion": "fusion", "--fusion-weights": "fusion_weights",
               "--rrf-k": "rrf_k", "--max-active-dims": "max_active_dims"}


def add_sparse_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("sparse and hybrid options (--beir)")
    group.add_argument("--sparse-model", metavar="SPARSE_DIR",
                       help="a sparse encoder evaluated beside MODEL_DIR (a dense model) and fused with it: hybrid")
    group.add_argument("--fusion", choices=FUSIONS,
                       help="--sparse-model: how the dense and the sparse lists are fused (default rrf)")
    group.add_argument("--fusion-weights", type=weight_pair, metavar="W_DENSE,W_SPARSE",
                       help="--sparse-model: each run's weight in the fusion (default 1,1)")
    group.add_argument("--rrf-k", type=int, metavar="K", help="--fusion rrf: the constant added to each rank "
                                                              "(default 60)")
    group.add_argument("--max-active-dims", type=int, metavar="N",
                       help="a sparse model: keep each vector's N largest weights (default: the model's own)")


def weight_pair(value: str) -> tuple[float, float]:
    """``"0.7,0.3"`` -> ``(0.7, 0.3)``; ArgumentTypeError unless two numbers at least 0, not both 0."""
    try:
        pair = tuple(float(item) for item in value.split(","))
    except ValueError:
        pair = ()
    if len(pair) != 2 or min(pair) < 0 or not any(pair):
        raise argparse.ArgumentTypeError(f"{value!r}: write two weights at least 0 (the dense run's, then the sparse "
                                         "run's), e.g. 1,1 or 0.7,0.3")
    return pair


def wants_sparse(args: argparse.Namespace) -> bool:
    """Whether ``bertkit evaluate`` evaluates a sparse model (MODEL_DIR is one, or a sparse flag is given)."""
    from bertkit.sentence.evaluation.sparse import is_sparse_encoder

    given = [flag for flag, name in SPARSE_ONLY.items() if getattr(args, name) is not None]
    return bool(given) or is_sparse_encoder(args.model)


def sparse_main(args: argparse.Namespace) -> int:
    """A sparse MODEL_DIR on --beir, or MODEL_DIR (dense) and --sparse-model fused: the record written atomically
    to -o, its means printed as JSON (and a hybrid's table on stderr)."""
    from bertkit.io import atomic_write_text, refuse_output_over_input
    from bertkit.sentence.evaluation.sparse import is_sparse_encoder

    sparse_dir = is_sparse_encoder(args.model)
    _check_flags(args, sparse_dir)
    output = args.output or "evaluation_beir.json"
    models = [("MODEL_DIR", args.model)] + ([("--sparse-model", args.sparse_model)] if args.sparse_model else [])
    refuse_output_over_input(("-o", output), [("--beir", args.beir)], models=models)
    report = _hybrid(args) if args.sparse_model is not None else _sparse(args)
    atomic_write_text(output, json.dumps(report, indent=2) + "\n")
    print(json.dumps({key: value for key, value in report.items() if key != "per_query"}, indent=2))
    if args.sparse_model is not None:
        from bertkit.sentence.evaluation.hybrid import side_by_side

        print(side_by_side(report), file=sys.stderr)
    return 0


def _check_flags(args: argparse.Namespace, sparse_dir: bool) -> None:
    """One-line errors for a model or flag of the wrong kind."""
    if args.beir is None:
        flag = "--sts" if args.sts is not None else "--data"
        raise ValueError(f"{flag} evaluates a dense embedding model; a sparse model (MODEL_DIR or --sparse-model) is "
                         "evaluated on retrieval: use --beir DIR.")
    if sparse_dir and args.sparse_model is not None:
        raise ValueError(f"MODEL_DIR {args.model} is a sparse encoder; hybrid evaluation takes the dense model as "
                         f"MODEL_DIR and the sparse one as --sparse-model.")
    if not sparse_dir and args.sparse_model is None:
        given = [flag for flag, name in SPARSE_ONLY.items() if getattr(args, name) is not None]
        raise ValueError(f"{given[0]} needs a sparse model, but MODEL_DIR {args.model} is a dense embedding model; "
                         "pass a sparse encoder as MODEL_DIR, or add --sparse-model SPARSE_DIR for hybrid.")
    if args.sparse_model is None:
        for flag in ("--fusion", "--fusion-weights", "--rrf-k"):
            if getattr(args, SPARSE_ONLY[flag]) is not None:
                raise ValueError(f"{flag} fuses a dense and a sparse run; add --sparse-model SPARSE_DIR (and a dense "
                                 "MODEL_DIR), or leave it out.")
        if args.similarity is not None:
            raise ValueError(f"--similarity scores a dense model; MODEL_DIR {args.model} is a sparse encoder, scored "
                             "by its own similarity (a dot product unless its config names cosine).")
    if args.max_active_dims is not None and args.max_active_dims < 1:
        raise ValueError(f"--max-active-dims must be at least 1 (weights kept per vector), got {args.max_active_dims}.")
    if args.rrf_k is not None and args.rrf_k < 0:
        raise ValueError(f"--rrf-k must be at least 0 (RRF's constant, 60 by default), got {args.rrf_k}.")


def _sparse(args: argparse.Namespace) -> dict:
    from bertkit.sentence.evaluation.sparse import load_sparse_encoder, sparse_beir_report

    model, dtype = load_sparse_encoder(args.model, dtype=args.dtype, max_seq_length=args.max_seq_length,
                                       device=args.device)
    report = sparse_beir_report(model, args.beir, split=args.split, k_values=args.k, batch_size=args.batch_size,
                                chunk_size=args.chunk_size, max_active_dims=args.max_active_dims,
                                ignore_identical_ids=args.ignore_identical_ids, model_name=args.model)
    return {"model": args.model, "dtype": dtype, **report}


def _hybrid(args: argparse.Namespace) -> dict:
    from bertkit.sentence.evaluation.evaluate import load_encoder
    from bertkit.sentence.evaluation.hybrid import hybrid_beir_report
    from bertkit.sentence.evaluation.sparse import load_sparse_encoder

    sparse, sparse_dtype = load_sparse_encoder(args.sparse_model, dtype=args.dtype,
                                               max_seq_length=args.max_seq_length, device=args.device,
                                               flag="--sparse-model")
    dense, dense_dtype = load_encoder(args.model, dtype=args.dtype, max_seq_length=args.max_seq_length,
                                      device=args.device)
    report = hybrid_beir_report(dense, sparse, args.beir, fusion=args.fusion or "rrf", weights=args.fusion_weights,
                                rrf_k=60 if args.rrf_k is None else args.rrf_k, candidates=args.top_k,
                                split=args.split, k_values=args.k, batch_size=args.batch_size,
                                chunk_size=args.chunk_size, sparse_chunk_size=args.chunk_size,
                                similarity=args.similarity, max_active_dims=args.max_active_dims,
                                ignore_identical_ids=args.ignore_identical_ids, sparse_model_name=args.sparse_model)
    return {"model": args.model, "sparse_model": args.sparse_model,
            "dtype": {"dense": dense_dtype, "sparse": sparse_dtype}, **report}
