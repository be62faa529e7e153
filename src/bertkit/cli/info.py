"""``bertkit info [SIZE|DIR|CONFIG]``: the family, architecture and parameter count of a preset or a checkpoint
(and, for a checkpoint directory, what it holds: :func:`bertkit.tasks.sources.inspect_source`'s layout, task,
labels, trained length and saved dtype); without an argument, this machine and what ``auto`` picks on it.

Parameters are counted from the config alone (:func:`bertkit.modeling.counting.count_parameters`), so
nothing is built or allocated: a config of any size is described at once. The machine's description asks the
same functions the commands ask (:func:`bertkit.training.config.resolve_device` and ``resolve_precision``,
:func:`bertkit.inference.precision.resolve`), so what it says ``auto`` picks is what a command picks.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from bertkit.cli import ArgumentParser

TAKES = ("info takes a size (tiny, mini, small, medium, base, large), a checkpoint directory (or a run's, holding "
         "model/), or its config.json")
#: the fields every model config gives (a family may spell them otherwise: DistilBERT's dim, n_layers)
SIZE_FIELDS = ("hidden_size", "num_hidden_layers")
#: CPU flags that decide the speed of bf16 (native arithmetic) and int8 (dynamic quantization's kernels)
CPU_FEATURES = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "avx512_vnni", "avx_vnni", "amx_int8", "bf16", "asimd",
                "i8mm")


def describe_machine() -> str:
    """This machine as the commands see it: torch, the CPU (cores, threads, the flags that matter for bf16 and
    int8), the GPUs, and what ``--device auto``, ``--precision auto`` (training) and ``--dtype auto``
    (inference, per task) pick here, with why."""
    import torch

    from bertkit import devices
    from bertkit.inference.precision import TASK_ROW, resolve
    from bertkit.modeling import numerics
    from bertkit.training.config import describe_precision, resolve_device, resolve_precision

    flags = devices._cpu_flags()  # through the module: tests set the flags there
    features = "unreadable" if flags is None else ", ".join(f for f in CPU_FEATURES if f in flags) or "none of " + \
        ", ".join(CPU_FEATURES)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    lines = [f"this machine: {platform.system()} {platform.machine()}, Python {platform.python_version()}, "
             f"torch {torch.__version__}",
             f"CPU: {_cpu_name()}; {usable} of {os.cpu_count()} cores usable here, torch uses "
             f"{torch.get_num_threads()} threads; kernels {torch.backends.cpu.get_cpu_capability()}; features: "
             f"{features}; int8 engine {torch.backends.quantized.engine}"]
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            lines.append(f"GPU cuda:{i}: {props.name}, compute {props.major}.{props.minor}, "
                         f"{props.total_memory / 2**30:.1f} GiB; {devices.bf16_reason(torch.device('cuda', i))}")
    else:
        cuda = f"torch built with CUDA {torch.version.cuda}, none visible" if torch.version.cuda else \
            "this torch is built without CUDA"
        mps = getattr(torch.backends, "mps", None)
        lines.append(f"GPU: none ({cuda}" + ("; Apple MPS available: --device gpu uses it" if mps is not None and
                                             mps.is_available() else "") + ")")
    device = resolve_device("auto")
    why = "a CUDA GPU is visible" if device.type == "cuda" else "no CUDA GPU"
    lines.append(f"--device auto -> {device.type} ({why})")
    lines.append(f"training --{describe_precision('auto', resolve_precision('auto', device), device)}")
    here = numerics.describe(device, "fp32")
    lines.append(f"float32 GEMM here: {here['gemm']} ({here['gemm_reason']})")
    lines.append("inference --dtype auto (embed, predict, serve, evaluate; on the CPU):")
    for row in dict.fromkeys(TASK_ROW.values()):
        choice = resolve("auto", "cpu", row)
        lines.append(f"  {row}: {choice.name} ({choice.reason})")
    lines.append("--threads auto (training): times the first steps with all threads and with one, keeps the faster")
    return "\n".join(lines)


def _cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo's, else what the platform says)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def describe(source: str) -> str:
    """A few lines on ``source``: a preset size name, a checkpoint directory or a config JSON file. The
    architecture's head (``config.json``'s ``architectures``) is counted too when bertkit knows it."""
    from bertkit.config import bert_architecture_name
    from bertkit.modeling.counting import POOLED, backbone_parameters, count_parameters

    static = _static(Path(source))
    if static is not None:
        return static
    config, architecture = _config_of(source)
    lines = [f"{source}: {_family(config)} L={config.num_hidden_layers} H={config.hidden_size} "
             f"A={config.num_attention_heads} intermediate={config.intermediate_size} vocab={config.vocab_size} "
             f"act={config.activation_name()} decoder={config.is_decoder}",
             f"backbone parameters: {backbone_parameters(config) / 1e6:.1f}M"]
    counted = bert_architecture_name(architecture) if architecture else None  # RobertaForMaskedLM: BERT's name
    if counted in POOLED and counted != "BertModel":
        lines.append(f"with its head ({architecture}): {count_parameters(config, counted) / 1e6:.1f}M")
    held = _what_it_holds(Path(source))
    if held:
        lines.append(held)
    return "\n".join(lines)


def _static(path: Path) -> str | None:
    """A static embedding model's lines (a token table, no transformer config to describe), or None for anything
    else."""
    from bertkit.tasks.sources import inspect_source, static_kind

    if static_kind(path) is None:
        return None
    info = inspect_source(path)
    vocabulary, dimensions = info.table
    return "\n".join([f"{path}: static embedding model ({info.static}) vocab={vocabulary} dim={dimensions}: one "
                      "vector per token, averaged; no transformer",
                      f"parameters: {vocabulary * dimensions / 1e6:.1f}M (the token table)",
                      f"holds: {info.describe()}"])


def _what_it_holds(path: Path) -> str | None:
    """:func:`bertkit.tasks.sources.inspect_source`'s line for a checkpoint directory (a run's: its ``model/``);
    None for a size or a config file, and for a config alone whose task only the absent weights would show."""
    from bertkit.tasks.sources import inspect_source

    if path.is_dir() and not (path / "config.json").is_file() and (path / "model" / "config.json").is_file():
        path = path / "model"
    if not path.is_dir():
        return None
    try:
        return f"holds: {inspect_source(path).describe()}"
    except FileNotFoundError:
        return None


def _config_of(source: str):
    """``(config, architecture or None)`` of a size, a directory or a JSON file; anything else is a ValueError
    saying what ``source`` is and what info takes."""
    from bertkit import BERTConfig, preset_config
    from bertkit.io import read_json_object
    from bertkit.presets import SIZES

    path = Path(source)
    if path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"
    elif path.is_dir() and (path / "model" / "config.json").is_file():  # a run's directory: the model it wrote
        path = path / "model" / "config.json"
    elif source in SIZES:  # a size, also when a folder without a config happens to bear its name
        return preset_config(source), None
    elif path.is_dir():
        raise ValueError(f"{source} is a directory without a config.json, so not a checkpoint; {TAKES}.")
    elif path.is_file() and path.suffix.lower() != ".json":
        raise ValueError(f"{source} is a file but not a model config (not .json); {TAKES}.")
    elif not path.is_file():
        raise ValueError(f"{source} is neither a model size nor an existing file or directory; {TAKES}.")
    data = read_json_object(path, "a model config")
    _check_is_config(data, path)
    architectures = data.get("architectures") or [None]
    return BERTConfig.from_json_file(path), architectures[0]


def numerics_lines(source: str) -> str:
    """How float32 products run in this process (the GEMM backend and why, threads, what ``auto`` precision
    picks), and, for a run's directory (or its ``model/``), what the run recorded in ``run.json``."""
    import torch

    from bertkit.devices import native_bf16
    from bertkit.modeling import numerics
    from bertkit.training.rundir import RUN_FILE, read_run_info

    here = numerics.describe("cpu", "fp32")
    lines = [f"numerics here: float32 GEMM {here['gemm']} ({here['gemm_reason']}); CPU kernels {here['cpu_kernels']}; "
             f"{torch.get_num_threads()} threads; precision auto = {'bf16' if native_bf16() else 'fp32'} on this CPU"
             + ("" if not torch.cuda.is_available() else ", bf16 on the GPU"), inference_dtype_line()]
    path = Path(source)
    for run_dir in (path, path.parent) if path.is_dir() else ():
        if (run_dir / RUN_FILE).is_file():
            stored = read_run_info(run_dir).get("numerics")
            if stored:
                threads = stored.get("threads")
                threads = threads.get("threads") if isinstance(threads, dict) else threads
                lines.append(f"the run ({run_dir}) computed on {stored.get('device')} in {stored.get('precision')}, "
                             f"float32 GEMM {stored.get('gemm')}, {threads} threads, torch {stored.get('torch')}")
                device = stored.get("device", "cpu")
                device = "cpu" if device == "cuda" and not torch.cuda.is_available() else device
                differ = numerics.differences(stored, numerics.describe(device, stored.get("precision", "fp32")))
                if differ:
                    lines.append(f"  differs here: {'; '.join(differ)} (its numbers would move in the last digits)")
            break
    return "\n".join(lines)


def _family(config) -> str:
    """``family=bert``, or ``family=roberta (xlm-roberta)`` where the HF model type is not the family's name."""
    return f"family={config.family}" + (f" ({config.hf_model_type})" if config.hf_model_type != config.family else "")


def _check_is_config(data: dict, path: Path) -> None:
    """A ValueError naming ``path`` unless ``data`` gives the :data:`SIZE_FIELDS` (as any family spells them):
    every other field has a default, so a JSON file of something else (SQuAD data, ``{}``) would read as
    BERT-base."""
    from bertkit.families import FAMILIES

    spellings = {field: {field} | {key for family in FAMILIES.values()
                                    for key, ours in family.hf_config_keys.items() if ours == field}
                 for field in SIZE_FIELDS}
    missing = [field for field, keys in spellings.items() if not keys & set(data)]
    if missing:
        keys = ", ".join(repr(k) for k in list(data)[:6]) + (", ..." if len(data) > 6 else "") if data else "none"
        raise ValueError(f"{path} is JSON but not a model config: it lacks {' and '.join(missing)}, which a config "
                         f"gives (e.g. {{\"hidden_size\": 768, \"num_hidden_layers\": 12, ...}}); its keys: {keys}. "
                         f"{TAKES}.")


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit info", description=__doc__)
    parser.add_argument("source", nargs="?", help="a size (tiny, mini, small, medium, base, large), a checkpoint "
                                                  "directory or its config.json; none: this machine and what auto "
                                                  "picks on it")
    args = parser.parse_args(argv)
    if args.source is None:
        print(describe_machine())
        return 0
    print(describe(args.source))
    print(numerics_lines(args.source))
    return 0


def inference_dtype_line() -> str:
    """What ``--dtype auto`` picks on this CPU for each pipeline task (:func:`bertkit.inference.precision.resolve`)."""
    from bertkit.inference.precision import TASK_ROW, resolve

    rows = dict.fromkeys(TASK_ROW.values())
    picks = {row: resolve("auto", "cpu", row).name for row in rows}
    return "inference dtype auto here: " + ", ".join(f"{row} {name}" for row, name in picks.items())
