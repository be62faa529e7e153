"""bertkit's speed against HF transformers and ONNX Runtime, in one run: inference (BERT, then every encoder
family bertkit runs), pretraining, fine-tuning, training an embedding model (``embedding_train.py``: bertkit's
bi-encoder step beside sentence-transformers', the cached loss's memory at growing batches).

Every table is measured in this process (peak memory in one child process per variant), the variants
interleaved round by round so machine drift hits them alike; times are medians. Ratios are against HF
fp32 (and ONNX Runtime fp32 for inference); "max diff" is the largest absolute difference to HF fp32
on the same weights (inference: last hidden state at real tokens; training: the loss before the first
step, without dropout; the timed steps train with BERT's dropout 0.1);
"% GEMM peak" is the model's FLOPs per second over the best throughput of one large product of the same
kind (fp32, bf16 or int8) measured at the start of the run.

    python benchmarks/run.py                 # everything, BERT-base (~10 min on 2 cores)
    python benchmarks/run.py --only inference --rounds 9
    python benchmarks/run.py --only families # one row per family (RoBERTa, MPNet, ...), HF vs bertkit vs ORT
    python benchmarks/run.py --only families --families deberta-v2 eurobert --tag new \
        --json benchmarks/results/run-families-new.json    # some of them, recorded beside the full table
    python benchmarks/run.py --only embedding  # all-MiniLM-L6-v2 vs sentence-transformers: step, cached-loss memory
    python benchmarks/run.py --only precision  # bf16 / int8 speed targets: embeddings, pretraining, serving
    python benchmarks/run.py --quick         # a tiny model, one round: checks that it all runs
    python benchmarks/run.py --only inference --json benchmarks/results/run-inference.json  # the docs' tables

``--json PATH`` writes every table and row with the machine, date, commit, command and load average
(``benchmarks/record.py``); the docs' Benchmarks page shows the files in ``benchmarks/results/``.

Needs the test extras (transformers) and onnxruntime, onnx, onnxscript (``pip install -e '.[test]'``).
"""

from __future__ import annotations

import argparse
import copy
import inspect
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import transformers

import bertkit
from bertkit.inference import native_bf16
from bertkit.modeling import fast
from bertkit.training import TrainingConfig
from bertkit.training.optim import build_optimizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import record
from timing import (
    BERT_INPUTS,
    Runner,
    Workload,
    forward_flops,
    gemm_peaks,
    interleaved,
    make_batch,
    measure,
    model_inputs,
    peak_for,
)

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

BASE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
SMALL = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)


# ---------------------------------------------------------------------------- inference
class _HFEncoder(torch.nn.Module):
    """An HF encoder as ``(*inputs) -> last_hidden_state`` for the ONNX exporter, the inputs named by ``names``."""

    def __init__(self, model, names):
        super().__init__()
        self.model, self.names = model, tuple(names)

    def forward(self, *inputs):
        return self.model(**dict(zip(self.names, inputs))).last_hidden_state


def onnx_sessions(hf, workdir: Path, threads: int, names=BERT_INPUTS, vocab: int = 2000,
                  pad_id: int | None = None, int8: bool = True) -> dict[str, object]:
    """ONNX Runtime sessions on HF's model exported by ``torch.onnx.export`` (fp32) and, with ``int8``,
    dynamically quantized; the graph's inputs are ``names`` (those HF's forward takes)."""
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    example = tuple(model_inputs(2, 16, 0.7, vocab, names, pad_id).values())
    batch, length = torch.export.Dim("batch", min=1, max=1024), torch.export.Dim("length", min=2, max=512)
    workdir.mkdir(parents=True, exist_ok=True)
    files = {"fp32": "hf.onnx"} | ({"int8": "hf-int8.onnx"} if int8 else {})
    torch.onnx.export(_HFEncoder(hf, names), example, str(workdir / files["fp32"]), input_names=list(names),
                      output_names=["last_hidden_state"], dynamic_shapes=(({0: batch, 1: length},) * len(names),),
                      opset_version=18, dynamo=True, verbose=False)
    if int8:
        quantize_dynamic(str(workdir / files["fp32"]), str(workdir / files["int8"]), weight_type=QuantType.QInt8)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return {name: ort.InferenceSession(str(workdir / file), options, providers=["CPUExecutionProvider"])
            for name, file in files.items()}


def run_hf(model) -> Runner:
    return lambda inputs: model(**inputs).last_hidden_state


def run_ours(model) -> Runner:
    return lambda inputs: model(**inputs)[0]


def run_ort(session) -> Runner:
    return lambda inputs: torch.from_numpy(session.run(None, {k: v.numpy() for k, v in inputs.items()})[0])


def inference(cfg: dict, args, peaks: dict[str, float], workdir: Path) -> list[dict]:
    torch.manual_seed(0)
    hf = transformers.BertModel(transformers.BertConfig(**cfg, attn_implementation="sdpa")).eval()
    hf.save_pretrained(workdir / "hf")
    eager = bertkit.BERT.from_pretrained(workdir / "hf").eval()
    ours = {"fp32": bertkit.optimize_for_inference(copy.deepcopy(eager)),
            "int8": bertkit.optimize_for_inference(copy.deepcopy(eager), quantize="int8")}
    if native_bf16():
        ours["bf16"] = bertkit.optimize_for_inference(copy.deepcopy(eager), dtype=torch.bfloat16)
    hf_bf16 = copy.deepcopy(hf).to(torch.bfloat16) if native_bf16() else None
    sessions = onnx_sessions(hf, workdir, torch.get_num_threads()) if not args.no_onnx else {}

    runs = {"HF fp32 (sdpa)": run_hf(hf), "bertkit fp32": run_ours(ours["fp32"])}
    if "fp32" in sessions:
        runs["ONNX Runtime fp32"] = run_ort(sessions["fp32"])
    extra = {}
    if "bf16" in ours:
        extra |= {"HF bf16": run_hf(hf_bf16), "bertkit bf16": run_ours(ours["bf16"])}
    extra["bertkit int8"] = run_ours(ours["int8"])
    if "int8" in sessions:
        extra["ONNX Runtime int8"] = run_ort(sessions["int8"])
    workloads = [Workload("8 x 128", 8, 128, 1.0), Workload("latency 1 x 128", 1, 128, 1.0, extra=False),
                 Workload("latency 1 x 16", 1, 16, 1.0, extra=False), Workload("8 x 128, 30 % padding", 8, 128, 0.7)]
    return measure(workloads, runs, args.rounds, vocab=cfg.get("vocab_size", 30522), extra=extra, cfg=cfg,
                   peaks=peaks)


# ---------------------------------------------------------------------------- inference, every family
#: family -> how its row is built, as data. ``hf_config`` / ``hf_model``: transformers' classes; ``sizes``: the
#: HF config keys of the benchmark's size dict where they differ (a tuple: several keys take the value);
#: ``kwargs``: the rest of the HF config (the family's released base checkpoint's, where HF's defaults are not);
#: ``attention``: HF's attention (MPNet and DeBERTa-v2 have no SDPA in HF; ModernBERT's flash attention needs a GPU);
#: ``bertkit``: the bertkit config factory whose presence (building a config of this family) says that the
#: installed bertkit runs the family. The inputs are those HF's forward takes (no token types for
#: DistilBERT, MPNet, ModernBERT); padded positions hold the config's ``pad_token_id``.
FAMILY_MODELS: dict[str, dict] = {
    "bert": dict(hf_config="BertConfig", hf_model="BertModel", bertkit="BERTConfig", kwargs={}),
    "roberta": dict(hf_config="RobertaConfig", hf_model="RobertaModel", bertkit="RoBERTaConfig",
                    kwargs=dict(vocab_size=50265, type_vocab_size=1, max_position_embeddings=514, pad_token_id=1,
                                bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5)),
    "mpnet": dict(hf_config="MPNetConfig", hf_model="MPNetModel", bertkit="MPNetConfig", attention="eager",
                  kwargs=dict(vocab_size=30527, max_position_embeddings=514, pad_token_id=1, bos_token_id=0,
                              eos_token_id=2, layer_norm_eps=1e-5, relative_attention_num_buckets=32)),
    "distilbert": dict(hf_config="DistilBertConfig", hf_model="DistilBertModel", bertkit="DistilBERTConfig",
                       sizes=dict(hidden_size="dim", num_hidden_layers="n_layers", num_attention_heads="n_heads",
                                  intermediate_size="hidden_dim"),
                       kwargs=dict(vocab_size=30522, max_position_embeddings=512, pad_token_id=0)),
    "electra": dict(hf_config="ElectraConfig", hf_model="ElectraModel", bertkit="ELECTRAConfig",
                    sizes=dict(hidden_size=("hidden_size", "embedding_size")),  # electra-base: embeddings of H
                    kwargs=dict(vocab_size=30522, type_vocab_size=2, max_position_embeddings=512, pad_token_id=0)),
    "modernbert": dict(hf_config="ModernBertConfig", hf_model="ModernBertModel", bertkit="ModernBERTConfig",
                       kwargs=dict(vocab_size=50368, max_position_embeddings=8192, pad_token_id=50283,
                                   bos_token_id=50281, eos_token_id=50282, cls_token_id=50281, sep_token_id=50282,
                                   global_attn_every_n_layers=3, local_attention=128)),
    # HF's DeBERTa-v2 has no SDPA; deberta-v3-base's switches (log-bucketed relative positions, c2p + p2c)
    "deberta-v2": dict(hf_config="DebertaV2Config", hf_model="DebertaV2Model", bertkit="DeBERTaV2Config",
                       attention="eager",
                       kwargs=dict(vocab_size=128100, max_position_embeddings=512, type_vocab_size=0, pad_token_id=0,
                                   relative_attention=True, max_relative_positions=-1, position_buckets=256,
                                   norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"],
                                   position_biased_input=False, layer_norm_eps=1e-7)),
    "gte": dict(hf_config="GteConfig", hf_model="GteModel", bertkit="GTEConfig",  # gte-base-en-v1.5
                kwargs=dict(vocab_size=30528, type_vocab_size=0, pad_token_id=0, max_position_embeddings=8192,
                            rope_parameters={"rope_type": "default", "rope_theta": 500000.0})),
    "nomic_bert": dict(hf_config="NomicBertConfig", hf_model="NomicBertModel", bertkit="NomicBERTConfig",
                       kwargs=dict(vocab_size=30528, max_position_embeddings=8192,  # nomic-embed-text-v1.5
                                   rope_parameters={"rope_type": "default", "rope_theta": 1000.0})),
    "jina_embeddings_v3": dict(hf_config="JinaEmbeddingsV3Config", hf_model="JinaEmbeddingsV3Model",
                               bertkit="JinaEmbeddingsV3Config",  # jina-embeddings-v3's switches at the base size
                               kwargs=dict(vocab_size=250002, max_position_embeddings=8194, pad_token_id=1,
                                           rope_parameters={"rope_type": "default", "rope_theta": 20000.0})),
    "eurobert": dict(hf_config="EuroBertConfig", hf_model="EuroBertModel", bertkit="EuroBERTConfig",
                     kwargs=dict(vocab_size=128256, max_position_embeddings=8192,  # EuroBERT-210m
                                 rope_parameters={"rope_type": "default", "rope_theta": 250000.0})),
}

FAMILY_WORKLOADS = [Workload("8 x 128, 30 % padding", 8, 128, 0.7), Workload("8 x 128", 8, 128, 1.0)]


def hf_family_config(spec: dict, size: dict):
    """The HF config of a :data:`FAMILY_MODELS` entry at ``size`` (the benchmark's size dict)."""
    fields = {}
    for key, value in size.items():
        keys = spec.get("sizes", {}).get(key, key)
        fields |= dict.fromkeys((keys,) if isinstance(keys, str) else keys, value)
    return getattr(transformers, spec["hf_config"])(**fields, **spec["kwargs"],
                                                    attn_implementation=spec.get("attention", "sdpa"))


def forward_inputs(model) -> tuple[str, ...]:
    """Those of :data:`BERT_INPUTS` that ``model``'s forward takes (DistilBERT, MPNet, ModernBERT: no token types)."""
    return tuple(name for name in BERT_INPUTS if name in inspect.signature(model.forward).parameters)


def bertkit_lacks(family: str, spec: dict) -> str | None:
    """Why the installed bertkit cannot run ``family`` (its config factory is missing or refuses), or None."""
    factory = getattr(bertkit, spec["bertkit"], None)
    if factory is None:
        return f"no bertkit.{spec['bertkit']} in this bertkit"
    try:
        config = factory()
    except Exception as error:  # whatever it raises, the family is not there
        return f"bertkit.{spec['bertkit']}() raised {type(error).__name__}: {error}"
    if config.family != family:
        return f"bertkit.{spec['bertkit']}() builds family {config.family!r}"
    return None


def family_inference(family: str, spec: dict, size: dict, args, workdir: Path) -> list[dict]:
    """HF fp32, bertkit fp32 (HF's checkpoint loaded by ``bertkit.BERT.from_pretrained``) and ONNX Runtime fp32
    (HF's model exported) on :data:`FAMILY_WORKLOADS`, same random weights (seeded)."""
    config = hf_family_config(spec, size)
    torch.manual_seed(0)
    hf = getattr(transformers, spec["hf_model"])(config).eval()
    directory = workdir / family
    hf.save_pretrained(directory / "hf")
    ours = bertkit.BERT.from_pretrained(directory / "hf", warn=False)
    if ours.config.family != family:
        raise RuntimeError(f"bertkit read the {family} checkpoint as family {ours.config.family!r}")
    ours = bertkit.optimize_for_inference(ours.eval())
    names = forward_inputs(hf)
    pad_id = config.pad_token_id
    runs = {f"HF fp32 ({hf.config._attn_implementation})": run_hf(hf), "bertkit fp32": run_ours(ours)}
    if not args.no_onnx:
        session = onnx_sessions(hf, directory, torch.get_num_threads(), names, config.vocab_size, pad_id,
                                int8=False)["fp32"]
        runs["ONNX Runtime fp32"] = run_ort(session)
    rows = measure(FAMILY_WORKLOADS, runs, args.rounds, vocab=config.vocab_size, names=names, pad_id=pad_id)
    return [{"family": family, **row} for row in rows]


def families(size: dict, args, workdir: Path) -> tuple[list[dict], list[str]]:
    """Rows of every family of :data:`FAMILY_MODELS` (those of ``--families``) the installed bertkit runs, and a
    note for each it does not."""
    rows, notes = [], []
    for family, spec in FAMILY_MODELS.items():
        if args.families and family not in args.families:
            continue
        lack = bertkit_lacks(family, spec)
        if lack:
            notes.append(f"{family}: {lack}")
            continue
        rows += family_inference(family, spec, size, args, workdir)
    return rows, notes


# ---------------------------------------------------------------------------- training steps
def mlm_batch(batch: int, length: int, vocab: int, real: float = 1.0, seed: int = 0) -> dict[str, torch.Tensor]:
    """A pretraining batch: 15 % of real positions labelled, NSP labels; full rows unless ``real`` < 1."""
    ids, mask, types = make_batch(batch, length, real, vocab, seed)
    g = torch.Generator().manual_seed(seed + 1)
    chosen = (torch.rand(ids.shape, generator=g) < 0.15) & mask.bool()
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types, "mlm_labels": labels,
            "nsp_labels": torch.randint(0, 2, (batch,), generator=g)}


def _configs(kind: str, cfg: dict) -> tuple[type, type, transformers.BertConfig]:
    hf_config = transformers.BertConfig(**cfg, attn_implementation="sdpa", num_labels=2)  # dropout 0.1 as BERT
    if kind == "pretraining":
        return transformers.BertForPreTraining, bertkit.BERTForPreTraining, hf_config
    return transformers.BertForSequenceClassification, bertkit.BERTForSequenceClassification, hf_config


def _training_models(kind: str, cfg: dict, workdir: Path):
    """(HF model, bertkit model) with the same random weights."""
    hf_cls, ours_cls, hf_config = _configs(kind, cfg)
    torch.manual_seed(0)
    hf = hf_cls(hf_config).train()
    path = workdir / f"{kind}-{cfg['hidden_size']}-{cfg['num_hidden_layers']}"
    hf.save_pretrained(path)
    return hf, ours_cls.from_pretrained(path).train()


def make_step(variant: str, kind: str, model, batch: dict) -> Callable[..., float]:
    """One optimizer step (forward, backward, AdamW) of ``variant`` on ``model``; returns the loss.

    HF: ``model(**inputs).loss`` and torch's AdamW (HF Trainer's default). bertkit: ``training_step``
    (the sparse MLM head in pretraining) and bertkit's optimizer (fused AdamW). Either under bf16 autocast
    (fp32 master weights, as HF Trainer's ``bf16=True`` and bertkit's ``precision="bf16"``) if named.
    """
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    bf16 = "bf16" in variant
    if variant.startswith("HF"):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        labels = (dict(labels=batch["mlm_labels"], next_sentence_label=batch["nsp_labels"]) if kind == "pretraining"
                  else dict(labels=batch["nsp_labels"]))

        def loss_fn():
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                return model(**inputs, **labels).loss
    else:
        optimizer = build_optimizer(model, TrainingConfig(max_steps=1, learning_rate=1e-5))
        ours_batch = batch if kind == "pretraining" else inputs | {"labels": batch["nsp_labels"]}

        def loss_fn():
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                return model.training_step(ours_batch)[0]

    def step(update: bool = True) -> float:
        """One training step; ``update=False``: the loss alone, in eval mode (no dropout), for comparison."""
        if not update:
            model.eval()
            with torch.no_grad():
                loss = loss_fn().item()
            model.train()
            return loss
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def _variants() -> list[str]:
    return ["HF fp32 + AdamW", "bertkit fp32"] + (["bertkit bf16 autocast"] if native_bf16() else [])


def _workload(kind: str, cfg: dict, batch: int, length: int, real: float) -> dict:
    return {"kind": kind, "cfg": cfg, "batch": batch, "length": length, "real": real}


def _batch(w: dict) -> dict[str, torch.Tensor]:
    return mlm_batch(w["batch"], w["length"], w["cfg"].get("vocab_size", 30522), w["real"])


def training(workloads: list[dict], args, peaks: dict[str, float], workdir: Path) -> list[dict]:
    rows = []
    for w in workloads:
        cfg, kind = w["cfg"], w["kind"]
        hf, ours = _training_models(kind, cfg, workdir)
        batch = _batch(w)
        models = {"HF fp32 + AdamW": hf, "bertkit fp32": ours, "bertkit bf16 autocast": copy.deepcopy(ours)}
        steps = {v: make_step(v, kind, models[v], batch) for v in _variants()}
        first = {name: step(update=False) for name, step in steps.items()}  # same weights: the losses agree
        seconds = interleaved(steps, args.rounds, warmup=1)
        memory = {v: peak_memory(w, v) for v in steps} if not args.quick else {}
        lengths = batch["attention_mask"].sum(1).tolist()
        flops = 3 * forward_flops(cfg, sum(lengths), lengths)  # forward + backward
        name = f"{kind} L{cfg['num_hidden_layers']}/H{cfg['hidden_size']} {w['batch']} x {w['length']}" + (
            f", {round(100 * (1 - w['real']))} % padding" if w["real"] < 1 else "")
        hf_name = "HF fp32 + AdamW"
        for v, s in seconds.items():
            peak = peak_for(v, peaks)
            rows.append({"workload": name, "variant": v, "ms": 1e3 * s, "x HF fp32": seconds[hf_name] / s,
                         "loss diff": abs(first[v] - first[hf_name]), "peak MB": memory.get(v),
                         "x HF memory": memory[v] / memory[hf_name] if memory else None,
                         "% GEMM peak": 100 * flops / s / 1e9 / peak})
    return rows


def peak_memory(workload: dict, variant: str) -> float:
    """Training memory (MB) of ``variant`` alone, measured in a child process: its peak RSS over three steps
    minus its RSS before the first (the interpreter, the imports and the weights)."""
    out = subprocess.run([sys.executable, __file__, "--memory-probe", json.dumps({**workload, "variant": variant}),
                          "--threads", str(torch.get_num_threads())], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_mb"]


def _status_mb(field: str) -> float:
    """A memory line of /proc/self/status in MB: ``VmRSS`` now, ``VmHWM`` its peak. (Not ``ru_maxrss``: it
    survives exec, so a child started by a big parent would report the parent's size.)"""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def memory_probe(spec: dict) -> None:
    hf_cls, ours_cls, hf_config = _configs(spec["kind"], spec["cfg"])
    torch.manual_seed(0)
    if spec["variant"].startswith("HF"):
        model = hf_cls(hf_config).train()
    else:
        model = ours_cls(bertkit.BERTConfig.from_hf_dict(hf_config.to_dict())).train()
    step = make_step(spec["variant"], spec["kind"], model, _batch(spec))
    before = _status_mb("VmRSS")
    for _ in range(3):
        step()
    print(json.dumps({"peak_mb": _status_mb("VmHWM") - before}))


# ---------------------------------------------------------------------------- report
markdown = record.markdown  # the scripts' tables and the docs' Benchmarks page format cells alike


def show(tables: list[dict], title: str, rows: list[dict], columns: list[str], notes: list[str] = ()) -> None:
    """Print a table under its ``## title`` (and its notes) and keep it in ``tables`` for the result file."""
    print(f"\n## {title}\n")
    print(markdown(rows, columns))
    if notes:
        print("\n" + "\n".join(notes))
    tables.append(record.table(title, rows, columns, notes))


SECTIONS = ("inference", "families", "pretraining", "finetuning", "accuracy", "embedding", "precision")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=SECTIONS, action="append")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--quick", action="store_true", help="tiny model, one round: a check that everything runs")
    parser.add_argument("--no-onnx", action="store_true", help="skip ONNX Runtime")
    parser.add_argument("--families", nargs="+", choices=list(FAMILY_MODELS), metavar="FAMILY",
                        help=f"the families section's rows: only these ({', '.join(FAMILY_MODELS)}; default all)")
    parser.add_argument("--tag", help="a suffix of the --json result's name (run-families-TAG), for a run of part of "
                                      "a section beside the full one")
    parser.add_argument("--json", type=Path, help="also write every row here")
    parser.add_argument("--memory-probe", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.memory_probe:
        return memory_probe(json.loads(args.memory_probe))
    if args.quick:
        args.rounds = 1
    sections = args.only or SECTIONS
    big, small = (TINY, TINY) if args.quick else (BASE, SMALL)

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.get_num_threads()} threads, "
          f"CPU capability {torch.backends.cpu.get_cpu_capability()}, native bf16: {native_bf16()}, "
          f"GEMM backend chosen: {fast.gemm_backend()}")
    peaks = gemm_peaks(args.rounds)
    tables: list[dict] = []
    show(tables, "GEMM, [1024, 768] x [768, 3072], GFLOP/s", [{"backend": k, "GFLOP/s": v} for k, v in peaks.items()],
         ["backend", "GFLOP/s"])
    results: dict[str, list[dict]] = {"gemm": [{"backend": k, "gflops": v} for k, v in peaks.items()]}
    with tempfile.TemporaryDirectory() as d:
        workdir = Path(d)
        if "inference" in sections:
            rows = inference(big, args, peaks, workdir)
            results["inference"] = rows
            show(tables, f"Inference, BERT {'base' if big is BASE else 'tiny'} encoder", rows,
                 ["workload", "variant", "ms", "real tokens/s", "x HF fp32", "x ORT fp32", "max diff", "% GEMM peak"])
        if "families" in sections:
            rows, notes = families(big, args, workdir)
            results["families"] = rows
            show(tables, f"Inference, every encoder family at the BERT-{'base' if big is BASE else 'tiny'} size "
                 f"(L{big['num_hidden_layers']}/H{big['hidden_size']}), random weights", rows,
                 ["family", "workload", "variant", "ms", "real tokens/s", "x HF fp32", "x ORT fp32", "max diff"],
                 ["Not in this bertkit yet:\n" + "\n".join(f"- {note}" for note in notes)] if notes else [])
        training_workloads = []
        if "pretraining" in sections:
            training_workloads += [_workload("pretraining", small, 32, 128, 1.0),
                                   _workload("pretraining", big, 8, 128, 1.0)]
        if "finetuning" in sections:
            training_workloads += [_workload("finetuning", big, 8, 128, 0.7)]
        if training_workloads:
            rows = training(training_workloads, args, peaks, workdir)
            results["training"] = rows
            show(tables, "Training steps (forward, backward, AdamW) vs HF + torch AdamW", rows,
                 ["workload", "variant", "ms", "x HF fp32", "loss diff", "peak MB", "x HF memory", "% GEMM peak"])
        if "accuracy" in sections:
            from format_accuracy import accuracy  # benchmarks/format_accuracy.py

            rows = accuracy(args, workdir)
            results["accuracy"] = rows
            name = "SPLADE-tiny" if args.quick else "all-MiniLM-L6-v2"
            show(tables, f"Accuracy of the fast variants: {name} fine-tuned on VADER Amazon (1 epoch), test set",
                 rows, ["variant", "test accuracy %", "agreement with fp32 %", "seconds", "examples"])
        if "embedding" in sections:
            results["embedding"] = embedding(args)
        if "precision" in sections:
            results["precision"] = precision(args, peaks, tables)
    if args.json:
        name = "run" + "".join(f"-{s}" for s in sections if args.only) + (f"-{args.tag}" if args.tag else "")
        record.write_result(args.json, name, tables, data=results, title=f"run.py: {', '.join(sections)}"
                            + (" (--quick)" if args.quick else ""))


def embedding(args) -> dict[str, list[dict]]:
    """The rows of ``embedding_train.py`` (printed there): its defaults, or small batches with ``--quick``."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from embedding_train import main as embedding_train

    print("\n## Training an embedding model (all-MiniLM-L6-v2, MNRL) vs sentence-transformers\n")
    sizes = ["--batch-sizes", "8", "--memory-batch-sizes", "32", "64", "--mini-batch-size", "16",
                 "--plain-batch-size", "16"] if args.quick else []
    return embedding_train(["--rounds", str(args.rounds), "--threads", str(args.threads), *sizes])


def precision(args, peaks: dict[str, float], tables: list[dict]) -> dict:
    """``precision_speed.py``'s tables (printed there): the machine's flags, embeddings, pretraining, serving in
    bf16 / int8 against fp32 and the reference libraries, with the issue's speed targets."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import precision_speed

    options = ["--rounds", str(args.rounds), "--threads", str(args.threads)] + (["--quick"] if args.quick else [])
    return precision_speed.report(precision_speed.parse_args(options), peaks, tables)


if __name__ == "__main__":
    main()
