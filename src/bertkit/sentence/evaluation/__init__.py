"""Evaluation of sentence-transformers models: retrieval metrics as trec_eval computes them (:mod:`.ir_metrics`),
BEIR directories (:mod:`.beir`), semantic textual similarity (:mod:`.sts`), an embedding model's reports
(:mod:`.evaluate`) and a reranker's (:mod:`.reranking`)."""
