"""``bertkit serve MODEL``: an HTTP server (text-embeddings-inference's routes, OpenAI's /v1/embeddings, /ner,
/qa, /fill-mask, /metrics, a page at /, OpenAPI docs at /docs), dynamically batched.

    bertkit serve all-MiniLM-L6-v2/ --port 8080
    curl -s localhost:8080/embed -H 'Content-Type: application/json' -d '{"inputs": ["Hello", "Bonjour"]}'

The task is read from the model (a sentence-transformers directory: embeddings; a classifier: classify, or
rerank with one label; a tagger: ner; QA; an MLM: fill-mask; a ColBERT directory: colbert, its token vectors on
/embed_all and MaxSim on /rerank; a static model, Model2Vec or sentence-transformers' StaticEmbedding: embeddings)
unless --task names it. --index DIR: /search answers the best documents of that
multi-vector index (exact or PLAID), which the served ColBERT model must have built. --workers N runs N
processes on one port (each loads the model; the server is stateless, so replicas also go behind any load
balancer). Needs the serve extra: pip install 'bertkit[serve]'.
"""

from __future__ import annotations

import argparse
import json
import os

from bertkit.cli import ArgumentParser, add_dtype_argument


def main(argv: list[str]) -> int:
    from bertkit.serving.settings import MAX_RESPONSE_BYTES, POOLINGS, TASKS, ServeSettings

    parser = ArgumentParser(prog="bertkit serve", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="anything bertkit loads: a directory, a checkpoint, a registered name")
    parser.add_argument("--task", choices=TASKS, default="auto",
                        help="what to serve (default auto: what the model holds, e.g. a classifier's head)")
    parser.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1 (this machine only)")
    parser.add_argument("--port", type=int, default=8080, help="TCP port (default 8080)")
    parser.add_argument("--max-batch-tokens", type=int, default=16384, help="tokens per model batch")
    parser.add_argument("--max-concurrent-requests", type=int, default=512, help="beyond: 429 Retry-After")
    parser.add_argument("--max-client-batch-size", type=int, default=32, help="inputs per request; beyond: 413")
    parser.add_argument("--max-input-length", type=int,
                        help="tokens per input (default: the length the model was fine-tuned at, its task.json; "
                             "else what the model takes); longer inputs: 422 unless truncated")
    parser.add_argument("--auto-truncate", action="store_true",
                        help="truncate inputs past --max-input-length when a request sends no \"truncate\"")
    parser.add_argument("--pooling", choices=POOLINGS,
                        help="embeddings' pooling; splade: a masked-LM model's SPLADE vectors (/embed_sparse)")
    parser.add_argument("--served-model-name",
                        help="the name /info and OpenAI's /v1/models give (default: a run's model, runs/NAME/model, "
                             "is NAME; any other model its folder's name)")
    parser.add_argument("--index", metavar="DIR",
                        help="a multi-vector index (exact or PLAID) built by this ColBERT model: /search answers "
                             "its best documents for each query")
    parser.add_argument("--tokenization-workers", type=int, help="threads counting and cutting inputs")
    add_dtype_argument(parser)
    parser.add_argument("--api-key", help="require 'Authorization: Bearer KEY' (or set BERTKIT_API_KEY); an "
                                          "empty or blank key is refused")
    parser.add_argument("--workers", type=int, default=1, help="server processes on this port")
    parser.add_argument("--device", help="cpu (default), cuda, gpu")
    parser.add_argument("--adapter", metavar="TASK",
                        help="a Jina embeddings v3 model's task adapter (retrieval.query, retrieval.passage, "
                             "separation, classification, text-matching) merged into its weights at start; every "
                             "request runs it (start one server per task)")
    parser.add_argument("--max-connections", type=int, default=1024,
                        help="open connections; beyond, new ones are closed at once")
    parser.add_argument("--timeout-keep-alive", type=float, default=5.0,
                        help="seconds a connection may stay idle, or take to send a request's headers")
    parser.add_argument("--body-timeout", type=float, default=60.0, help="seconds to send a request body (else 408)")
    parser.add_argument("--max-response-bytes", type=int, default=MAX_RESPONSE_BYTES,
                        help="what one answer may weigh as JSON (default 64 MiB); beyond: 413")
    args = parser.parse_args(argv)
    api_key = args.api_key if args.api_key is not None else os.environ.get("BERTKIT_API_KEY")
    settings = ServeSettings(model=args.model, task=args.task, host=args.host, port=args.port,
                             max_batch_tokens=args.max_batch_tokens,
                             max_concurrent_requests=args.max_concurrent_requests,
                             max_client_batch_size=args.max_client_batch_size,
                             max_input_length=args.max_input_length, auto_truncate=args.auto_truncate,
                             pooling=args.pooling, served_model_name=args.served_model_name,
                             tokenization_workers=args.tokenization_workers, dtype=args.dtype, api_key=api_key,
                             workers=args.workers, device=args.device, max_connections=args.max_connections,
                             timeout_keep_alive=args.timeout_keep_alive, body_timeout=args.body_timeout,
                             max_response_bytes=args.max_response_bytes, index=args.index,
                             adapter=args.adapter).check()
    try:
        import uvicorn
    except ImportError:
        raise ImportError("bertkit serve needs FastAPI and uvicorn: pip install 'bertkit[serve]'") from None
    from bertkit.serving.app import ENVIRONMENT, app_from_environment, uvicorn_config

    server_settings = {k: v for k, v in settings.to_dict().items() if k not in ("host", "port")}
    os.environ[ENVIRONMENT] = json.dumps(server_settings)  # each worker process builds the app from it
    # one process: the app is built here, so a model that fails its probe stops the start with its reason
    app = app_from_environment() if settings.workers == 1 else "bertkit.serving.app:app_from_environment"
    print(f"bertkit serve: {args.model} on http://{settings.host}:{settings.port} ({settings.workers} worker"
          f"{'s' if settings.workers > 1 else ''}); docs at /docs{' (the API key is required)' if api_key else ''}")
    uvicorn.run(**uvicorn_config(app, settings, factory=settings.workers > 1, workers=settings.workers))
    return 0
