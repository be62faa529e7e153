"""Shared fixtures: a tiny odd-sized config (every dimension distinct and awkward) and reference helpers."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time

import pytest
import torch

from bertkit import BERTConfig, BERTForPreTraining
from bertkit.modeling import fast

#: the suite compares against float32 references, so ``dtype="auto"`` means fp32 here (and in the commands the
#: tests start) whatever the machine; tests of ``auto`` itself remove this (tests/test_precision_auto.py)
os.environ["BERTKIT_DTYPE"] = "fp32"

#: under pytest-xdist (``make test`` runs one worker per core) each worker and the commands it starts compute on
#: one thread: two workers of two threads each on two cores would wait on each other's OpenMP barriers
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)


def without_dtype_line(err: str) -> str:
    """A command's stderr less the one ``bertkit: dtype ...`` line the inference commands print when they load a
    model (what an error test then holds to one line)."""
    return "".join(line for line in err.splitlines(keepends=True) if not line.startswith("bertkit: dtype "))

#: a subprocess of the suite that shows no progress for this long is called hung: a guard against a hang, far
#: above the longest honest silence on a busy 2-core machine, never a time limit that decides a verdict. Progress
#: is judged by a heartbeat (see run_guarded); a command given none is judged by its wall time
HANG_GUARD_S = 1800
#: seconds between two looks at a guarded command's heartbeat
GUARD_POLL_S = 0.5


def heartbeat_of(path: os.PathLike | None) -> tuple:
    """What changes while a command makes progress: (name, size, mtime) of ``path`` and of every file under it
    (a run directory: its metrics.jsonl grows, checkpoints appear); ``()`` while it does not exist."""
    if path is None or not os.path.exists(path):
        return ()
    files = [path] if os.path.isfile(path) else [os.path.join(root, name) for root, _, names in os.walk(path)
                                                   for name in names]
    marks = []
    for file in sorted(files):
        try:
            stat = os.stat(file)
        except FileNotFoundError:  # replaced (atomic writes) between the walk and the stat
            continue
        marks.append((file, stat.st_size, stat.st_mtime_ns))
    return tuple(marks)


def run_guarded(command: list, *, heartbeat: os.PathLike | None = None, capture_output: bool = False,
                input=None, check: bool = False, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(command, ...)`` under the hang guard: a child that shows no progress for
    :data:`HANG_GUARD_S` is killed and fails the test as *hung* (not as a wrong result), naming the command.

    ``heartbeat``: a file or directory the command writes as it progresses (e.g. a run's output directory, where
    metrics.jsonl grows with the steps); any change under it restarts the guard's clock, so a slow run that moves
    is never called hung, however long it takes. Without one, the guard counts from the start."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with subprocess.Popen(command, **kwargs) as process:
        mark, moved = heartbeat_of(heartbeat), time.monotonic()
        while True:
            try:
                stdout, stderr = process.communicate(input, timeout=GUARD_POLL_S)
                break
            except subprocess.TimeoutExpired:
                input = None  # sent on the first call; a retry must not send it again
            now = heartbeat_of(heartbeat)
            if now != mark:
                mark, moved = now, time.monotonic()
            elif time.monotonic() - moved > HANG_GUARD_S:
                process.kill()
                process.communicate()
                watched = f"no change in {heartbeat}" if heartbeat is not None else "it did not exit"
                pytest.fail(f"hung: `{shlex.join(map(str, command))}`: {watched} for the {HANG_GUARD_S} s hang "
                            "guard", pytrace=False)
    result = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    if check:
        result.check_returncode()
    return result


# The suite runs the fast path's kernels (oneDNN products, unpadded execution) whatever this machine's
# measurement would choose, so they are what it tests; `engine_path` also runs a module on the plain path.
fast.set_fast_path(True, gemm="onednn")


@pytest.fixture(params=["fast", "plain"])
def engine_path(request):
    """Run a test on the fast path (oneDNN products, unpadded execution) and on the plain PyTorch path."""
    with fast.fast_path(request.param == "fast"):
        yield request.param

#: hidden 36 with 3 heads (head dim 12), inner 37, vocab 99, 3 token types: shapes no bug can hide behind.
TINY = dict(vocab_size=99, hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=37,
            max_position_embeddings=40, type_vocab_size=3, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)
V = TINY["vocab_size"]


@pytest.fixture
def tiny_config() -> BERTConfig:
    return BERTConfig(**TINY, mask_token_id=4, cls_token_id=2, sep_token_id=3, unk_token_id=1)


def randomize_(model: torch.nn.Module, seed: int = 0, std: float = 0.2,
               norms: str = r"LayerNorm\.weight$") -> torch.nn.Module:
    """Give every parameter (biases and LayerNorms too) random values, so no zero-init hides a bug; the weights
    whose names match ``norms`` (a family's norm weights) lie around 1."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g) * std
            p.copy_(1.0 + noise if re.search(norms, name) else noise)
    return model


def padded_batch(vocab_size: int = 99, batch: int = 3, length: int = 11, type_vocab: int = 3, seed: int = 1):
    """Random ids, mixed token types and a padding mask with a shorter second and third row."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab_size, (batch, length), generator=g)
    token_type_ids = torch.randint(0, type_vocab, (batch, length), generator=g)
    attention_mask = torch.ones(batch, length, dtype=torch.long)
    attention_mask[1, length - 4:] = 0
    attention_mask[2, length - 7:] = 0
    input_ids[attention_mask == 0] = 0
    return input_ids, attention_mask, token_type_ids


SPECIAL = dict(mask_token_id=4, cls_token_id=2, sep_token_id=3, unk_token_id=1)  # pad is 0


def model_of(cls, seed=0, **overrides):
    """A randomised model in eval mode on the tiny config with special ids set."""
    config = BERTConfig(**{**TINY, **overrides}, **SPECIAL)
    return randomize_(cls(config), seed=seed).eval()


@pytest.fixture(scope="module")
def pretraining():
    return model_of(BERTForPreTraining)


@pytest.fixture(scope="module")
def batch():
    return padded_batch()


def mlm_labels_for(input_ids, attention_mask, seed=2):
    """Labels at ~40% of the real tokens of rows 0 and 1; row 2 has none."""
    g = torch.Generator().manual_seed(seed)
    pick = (torch.rand(input_ids.shape, generator=g) < 0.4) & (attention_mask == 1)
    pick[0, 0] = True
    pick[2] = False
    targets = torch.randint(0, V, input_ids.shape, generator=g)
    return torch.where(pick, targets, torch.full_like(input_ids, -100))


NSP = torch.tensor([0, 1, 1])


def run_torchrun(script: str, *arguments: str, processes: int = 2) -> subprocess.CompletedProcess:
    """``script`` under torchrun with ``processes`` gloo ranks on 127.0.0.1 (one thread each); retried on a
    fresh port when another process took the free one first (torchrun then fails fast)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    if sys.platform.startswith("linux"):
        env["GLOO_SOCKET_IFNAME"] = "lo"
    for _ in range(3):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={processes}",
                   "--master-addr=127.0.0.1", f"--master-port={port}", script, *arguments]
        result = run_guarded(command, env=env, capture_output=True, text=True)
        if "EADDRINUSE" not in result.stderr:
            break
    return result


def kill_when(command: list, marker: os.PathLike) -> None:
    """Run ``command`` and SIGKILL it as soon as ``marker`` exists (or when it ends by itself, or after
    :data:`HANG_GUARD_S`); returns once the process is gone. The caller checks the marker was reached."""
    import signal
    import subprocess
    import time

    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + HANG_GUARD_S
    while not os.path.exists(marker) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
