"""What the serving tests share: tiny models of each task, a live uvicorn server with bertkit serve's own
configuration (its connection limits too), and the error-body check."""

from __future__ import annotations

import contextlib
import json
import pathlib
import socket
import threading
import time

import bertkit
from conftest import randomize_

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "of", "paris", "is", "capital", "france", "emma",
         "wrote", "who", "austen", "jane", "novel", "in", "lived", "city", ",", ".", "?", "!", "##s", "##ed", "hello",
         "world", "good", "bad", "movie", "x"]
#: text-embeddings-inference's error types
TEI_TYPES = {"Unhealthy", "Backend", "Overloaded", "Validation", "Tokenizer", "Empty"}


def tiny(directory: pathlib.Path, cls, *, max_position_embeddings: int = 64, **config) -> pathlib.Path:
    """A random bertkit model of class ``cls`` and its tokenizer in ``directory``."""
    directory.mkdir()
    (directory / "vocab.txt").write_text("\n".join(WORDS) + "\n", encoding="utf-8")
    bertkit.BERTTokenizerFast(vocab_file=str(directory / "vocab.txt")).save_pretrained(directory)
    cfg = bertkit.BERTConfig(vocab_size=len(WORDS), hidden_size=24, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=30, max_position_embeddings=max_position_embeddings, **config)
    randomize_(cls(cfg), seed=0, std=0.5).save_pretrained(directory)
    return directory


def tiny_models(root: pathlib.Path) -> dict[str, pathlib.Path]:
    return {"classify": tiny(root / "cls", bertkit.BERTForSequenceClassification, num_labels=3,
                             id2label={0: "neg", 1: "neu", 2: "pos"}),
            "rerank": tiny(root / "rerank", bertkit.BERTForSequenceClassification, num_labels=1),
            "ner": tiny(root / "ner", bertkit.BERTForTokenClassification, num_labels=3,
                        id2label={0: "O", 1: "B-PER", 2: "I-PER"}),
            "qa": tiny(root / "qa", bertkit.BERTForQuestionAnswering),
            "fill-mask": tiny(root / "mlm", bertkit.BERTForMaskedLM)}


def nan_model(directory: pathlib.Path) -> pathlib.Path:
    """A classifier whose classifier weights hold NaN (a broken checkpoint)."""
    import torch

    model = bertkit.BERTForSequenceClassification.from_pretrained(tiny(directory, bertkit.BERTForSequenceClassification,
                                                                       num_labels=2), warn=False)
    with torch.no_grad():
        model.classifier.weight[0, 0] = float("nan")
    model.save_pretrained(directory)
    return directory


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(app, **settings):
    """``app`` on uvicorn in a thread on 127.0.0.1 with ``bertkit serve``'s configuration (``settings``: e.g.
    ``max_connections``, ``timeout_keep_alive``); yields its base URL and the server; stops it at the end."""
    import uvicorn

    from bertkit.serving.app import uvicorn_config
    from bertkit.serving.settings import ServeSettings

    port = free_port()
    config = uvicorn_config(app, ServeSettings(model="-", port=port, **settings))
    server = uvicorn.Server(uvicorn.Config(**config))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def error_of(response, status: int, error_type: str | None = None) -> str:
    """The message of a TEI-shaped error answer with ``status`` (and ``error_type``, one of TEI's)."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "error_type"} and body["error"], body
    assert body["error_type"] in TEI_TYPES, body
    if error_type:
        assert body["error_type"] == error_type, body
    return body["error"]


def raw_request(port: int, data: bytes, *, timeout: float = 10.0) -> bytes:
    """Send raw bytes to the server and read its answer until it closes or ``timeout`` (chunked bodies, lies)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        with contextlib.suppress(OSError):
            while chunk := s.recv(65536):
                chunks.append(chunk)
                if b"\r\n\r\n" in b"".join(chunks) and _complete(b"".join(chunks)):
                    break
    return b"".join(chunks)


def _complete(answer: bytes) -> bool:
    head, _, body = answer.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0


def json_body(answer: bytes) -> dict:
    return json.loads(answer.partition(b"\r\n\r\n")[2])
