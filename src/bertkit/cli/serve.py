"""``bertkit serve MODEL``: an HTTP server (text-embeddings-inference's routes, OpenAI's /v1/embeddings, /ner,
/qa, /fill-mask, /metrics, a page at /, OpenAPI docs at /docs), dynamically batched.

    bertkit serve all-MiniLM-L6-v2/ --port 8080
    curl -s localhost:8080/embed -H 'Content-Type: application/json' -d '{"inputs": ["Hello", "Bonjour"]}'

The task is read from the model (a sentence-transformers directory: embeddings; a classifier: classify, or
rerank with one label; a tagger: ner; QA; an MLM: fill-mask) unless --task names it. --workers N runs N
processes on one port (each loads the model; the server is stateless, so replicas also go behind any load
balancer). Needs the serve extra: pip install 'bertkit[serve]'.
"""

from __future__ import annotations

import argparse
import json
import os

from bertkit.cli import ArgumentParser


def main(argv: list[str]) -> int:
    from bertkit.serving.settings import DTYPES, TASKS, ServeSettings

    parser = ArgumentParser(prog="bertkit serve", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="anything bertkit loads: a directory, a checkpoint, a registered name")
    parser.add_argument("--task", choices=TASKS, default="auto")
    parser.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1 (this machine only)")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--max-batch-tokens", type=int, default=16384, help="tokens per model batch")
    parser.add_argument("--max-concurrent-requests", type=int, default=512, help="beyond: 429 Retry-After")
    parser.add_argument("--max-client-batch-size", type=int, default=32, help="inputs per request; beyond: 413")
    parser.add_argument("--dtype", choices=DTYPES, default="fp32")
    parser.add_argument("--api-key", help="require 'Authorization: Bearer KEY' (or set BERTKIT_API_KEY)")
    parser.add_argument("--workers", type=int, default=1, help="server processes on this port")
    parser.add_argument("--device", help="cpu (default), cuda, gpu")
    args = parser.parse_args(argv)
    settings = ServeSettings(model=args.model, task=args.task, host=args.host, port=args.port,
                             max_batch_tokens=args.max_batch_tokens,
                             max_concurrent_requests=args.max_concurrent_requests,
                             max_client_batch_size=args.max_client_batch_size, dtype=args.dtype,
                             api_key=args.api_key or os.environ.get("BERTKIT_API_KEY") or None,
                             workers=args.workers, device=args.device).check()
    try:
        import uvicorn
    except ImportError:
        raise ImportError("bertkit serve needs FastAPI and uvicorn: pip install 'bertkit[serve]'") from None
    from bertkit.serving.app import ENVIRONMENT

    server_settings = {k: v for k, v in settings.to_dict().items() if k not in ("host", "port")}
    os.environ[ENVIRONMENT] = json.dumps(server_settings)  # each worker process builds the app from it
    print(f"bertkit serve: {args.model} on http://{settings.host}:{settings.port} ({settings.workers} worker"
          f"{'s' if settings.workers > 1 else ''}); docs at /docs")
    uvicorn.run("bertkit.serving.app:app_from_environment", factory=True, host=settings.host, port=settings.port,
                workers=settings.workers, log_level="warning", timeout_graceful_shutdown=30)
    return 0
