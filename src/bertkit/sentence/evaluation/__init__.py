"""Evaluation of sentence-transformers models: retrieval metrics as trec_eval computes them, BEIR directories,
semantic textual similarity, a sparse encoder's retrieval through an inverted index, a multi-vector (ColBERT)
model's retrieval by exact MaxSim or through a kept index, and the reports ``bertkit evaluate`` writes for an
embedding model (retrieval, STS) and a reranker (over a first stage's top k, or over rows of candidates)."""

from bertkit.sentence.evaluation.beir import BeirData, load_beir
from bertkit.sentence.evaluation.evaluate import beir_report, evaluate_retrieval, load_encoder, sts_report
from bertkit.sentence.evaluation.ir_metrics import evaluate_rankings, evaluate_run
from bertkit.sentence.evaluation.multi_vector import evaluate_multivector_retrieval
from bertkit.sentence.evaluation.reranking import BeirRerankEvaluator, RowsRerankEvaluator, rerank_report, rows_report
from bertkit.sentence.evaluation.sparse import evaluate_sparse_retrieval
from bertkit.sentence.evaluation.sts import evaluate_sts, read_sts

__all__ = ["BeirData", "BeirRerankEvaluator", "RowsRerankEvaluator", "beir_report", "evaluate_multivector_retrieval",
           "evaluate_rankings", "evaluate_retrieval", "evaluate_run", "evaluate_sparse_retrieval", "evaluate_sts",
           "load_beir", "load_encoder", "read_sts", "rerank_report", "rows_report", "sts_report"]
