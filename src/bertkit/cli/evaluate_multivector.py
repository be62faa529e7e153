"""``bertkit evaluate``'s multi-vector side: a ColBERT directory (sentence-transformers 6, PyLate or Stanford
layout) on --beir alone, by exact MaxSim over the whole corpus or through a kept index (--index). The flags and
what they do are documented in :mod:`bertkit.cli.evaluate`; a ColBERT with --first-stage reranks that first
stage's candidates instead (:func:`bertkit.cli.evaluate.rerank_main`)."""

from __future__ import annotations

import argparse
import json

from bertkit.sentence.evaluation.multi_vector import CANDIDATES, NPROBE

#: documents encoded at once at most (--chunk-size's default, 50000, is a dense model's: a ColBERT's token vectors
#: are a hundred times larger)
ENCODE_CHUNK = 4096
#: the flags only a multi-vector evaluation takes, with the attribute each sets
MULTIVECTOR_ONLY = {"--index": "index", "--exact-index": "exact_index", "--nprobe": "nprobe",
                    "--candidates": "candidates", "--save-index": "save_index"}


def add_multivector_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("multi-vector (ColBERT) options (--beir without --first-stage)")
    group.add_argument("--index", metavar="INDEX_DIR",
                       help="search a kept exact or PLAID index of the BEIR corpus built by MODEL_DIR instead of "
                            "encoding the corpus (default: encode it and search it exactly)")
    group.add_argument("--exact-index", metavar="INDEX_DIR",
                       help="--index of a PLAID index: the exact index it was compressed from; its short list is "
                            "scored on the stored vectors (exact MaxSim) instead of decompressed ones")
    group.add_argument("--nprobe", type=int, metavar="N",
                       help=f"--index of a PLAID index: centroids probed per query token (default {NPROBE})")
    group.add_argument("--candidates", type=int, metavar="N",
                       help=f"--index of a PLAID index: documents scored by MaxSim per query, at least the largest "
                            f"--k (default {CANDIDATES})")
    group.add_argument("--save-index", metavar="INDEX_DIR",
                       help="keep the exact index the evaluation builds (a new or empty directory), to evaluate "
                            "again with --index or compress")


def wants_multivector(args: argparse.Namespace) -> bool:
    """Whether ``bertkit evaluate`` evaluates a ColBERT's retrieval (MODEL_DIR is one and no first stage or rows
    are given for it to rerank, or a multi-vector flag is given)."""
    from bertkit.sentence.colbert_layouts import is_colbert_directory

    given = any(getattr(args, name) is not None for name in MULTIVECTOR_ONLY.values())
    return given or (is_colbert_directory(args.model) and args.first_stage is None and args.rerank is None)


def multivector_main(args: argparse.Namespace) -> int:
    """A ColBERT MODEL_DIR on --beir: the record written atomically to -o, its means printed as JSON."""
    from bertkit.io import atomic_write_text, refuse_output_over_input

    _check_flags(args)
    output = args.output or "evaluation_beir.json"
    refuse_output_over_input(("-o", output), [("--beir", args.beir)], models=[("MODEL_DIR", args.model)])
    report = _report(args)
    atomic_write_text(output, json.dumps(report, indent=2) + "\n")
    print(json.dumps({key: value for key, value in report.items() if key != "per_query"}, indent=2))
    return 0


def _check_flags(args: argparse.Namespace) -> None:
    """One-line errors for a model or flag of the wrong kind."""
    from bertkit.sentence.colbert_layouts import is_colbert_directory

    given = [flag for flag, name in MULTIVECTOR_ONLY.items() if getattr(args, name) is not None]
    if not is_colbert_directory(args.model):
        raise ValueError(f"{given[0]} searches a multi-vector index, but MODEL_DIR {args.model} is not a ColBERT "
                         "directory (sentence-transformers 6 MultiVectorEncoder, PyLate or Stanford layout); pass "
                         "the ColBERT that built the index, or leave it out.")
    if args.beir is None or args.first_stage is not None or args.rerank is not None:
        flag = next(f for f, v in (("--first-stage", args.first_stage), ("--rerank", args.rerank),
                                   ("--sts", args.sts), ("--data", args.data)) if v is not None)
        raise ValueError(f"{given[0]} goes with --beir DIR alone (retrieval over the whole corpus); {flag} is "
                         "another evaluation: leave one of them out.")
    if args.similarity is not None:
        raise ValueError(f"--similarity scores a dense model; MODEL_DIR {args.model} is a ColBERT, scored by MaxSim.")
    if args.index is not None and args.save_index is not None:
        raise ValueError("--save-index keeps the index an evaluation builds; with --index nothing is built: give "
                         "one or the other.")
    for flag, name in (("--exact-index", "exact_index"), ("--nprobe", "nprobe"), ("--candidates", "candidates")):
        if getattr(args, name) is not None and args.index is None:
            raise ValueError(f"{flag} sets how a PLAID index is searched; add --index PLAID_DIR, or leave it out.")
    for flag, value in (("--nprobe", args.nprobe), ("--candidates", args.candidates)):
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be at least 1, got {value}.")


def _report(args: argparse.Namespace) -> dict:
    import bertkit
    from bertkit.retrieval.multivector import MultiVectorIndex
    from bertkit.retrieval.plaid import PlaidIndex
    from bertkit.retrieval.sparse_corpus import model_fingerprint
    from bertkit.sentence.evaluation.multi_vector import multivector_beir_report, open_index

    model = bertkit.MultiVectorEncoder(args.model, args.device, dtype=args.dtype)
    if args.max_seq_length is not None:
        if args.max_seq_length < 1:
            raise ValueError(f"--max-seq-length must be at least 1, got {args.max_seq_length}.")
        model.document_length = min(args.max_seq_length, model.document_length)
    fingerprint = model_fingerprint(args.model)
    dim = model.get_sentence_embedding_dimension()
    index = open_index(args.index, model=fingerprint, dim=dim) if args.index is not None else None
    exact = MultiVectorIndex.load(args.exact_index, model=fingerprint, dim=dim) \
        if args.exact_index is not None else None
    if exact is not None and not isinstance(index, PlaidIndex):
        raise ValueError(f"--exact-index scores a PLAID index's short list, but --index {args.index} is an exact "
                         "index (searched exactly already); leave --exact-index out.")
    report = multivector_beir_report(model, args.beir, split=args.split, k_values=args.k, batch_size=args.batch_size,
                                     chunk_size=min(args.chunk_size, ENCODE_CHUNK), index=index, exact=exact,
                                     nprobe=args.nprobe or NPROBE, candidates=args.candidates or CANDIDATES,
                                     index_directory=args.save_index, model_name=fingerprint,
                                     ignore_identical_ids=args.ignore_identical_ids)
    used = model.dtype_choice.name if model.dtype_choice is not None else "fp32"
    return {"model": args.model, "dtype": used, **report}
