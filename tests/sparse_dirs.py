"""Sparse model directories written by sentence-transformers 6.2 itself (SPLADE, an inference-free Router, CSR)
and a BGE-M3 directory (XLM-R with FlagEmbedding's ``sparse_linear.pt``), all tiny, random and odd-sized: what the
sparse serving and inspection tests load. No downloads."""

from __future__ import annotations

import pathlib
import warnings

import torch

from family_dirs import family_dir

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghijklmnopqrstuvwxyz",
         "the", "cat", "dog", "sat", "on", "mat", "berlin", "city", "river", "how", "many", "people", "live", "in",
         "is", "big", "##s", "##ed", "what", "old", "new", "town", "query", "passage", ":"]
PROMPTS = {"query": "query: ", "passage": "passage: "}


def mlm_dir(directory: pathlib.Path) -> str:
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(WORDS), hidden_size=36, num_hidden_layers=2,
                                     num_attention_heads=3, intermediate_size=37, max_position_embeddings=64,
                                     initializer_range=0.3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    transformers.BertForMaskedLM(config).save_pretrained(directory)
    (directory / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    transformers.BertTokenizerFast(str(directory / "vocab.txt")).save_pretrained(directory)
    return str(directory)


def sparse_dirs(root: pathlib.Path) -> dict[str, str]:
    """``{"splade", "inference-free", "csr", "bge-m3"}`` -> a directory of that kind under ``root``, and ``"mlm"``:
    the masked LM the first three start from."""
    import sentence_transformers as st
    import transformers
    from sentence_transformers.base.modules import Router, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from sentence_transformers.sparse_encoder.modules import (
        MLMTransformer,
        SparseAutoEncoder,
        SparseStaticEmbedding,
        SpladePooling,
    )

    mlm = mlm_dir(root / "mlm")
    dirs = {kind: str(root / kind) for kind in ("splade", "inference-free", "csr")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MLMTransformer's deprecation: the form most published models have
        st.SparseEncoder(modules=[MLMTransformer(mlm), SpladePooling("max")], device="cpu",
                         prompts=PROMPTS).save(dirs["splade"])
        torch.manual_seed(1)
        static = SparseStaticEmbedding(tokenizer=transformers.AutoTokenizer.from_pretrained(mlm),
                                       weight=torch.rand(len(WORDS)) * 3 - 0.5)
        router = Router.for_query_document(query_modules=[static],
                                           document_modules=[MLMTransformer(mlm), SpladePooling("max")])
        st.SparseEncoder(modules=[router], device="cpu", prompts=PROMPTS).save(dirs["inference-free"])
        torch.manual_seed(2)
        autoencoder = SparseAutoEncoder(36, hidden_dim=47, k=5, normalize=True)
        for parameter in autoencoder.parameters():
            parameter.data.normal_(0, 0.5)
        st.SparseEncoder(modules=[Transformer(mlm), Pooling(36, "mean"), autoencoder], device="cpu").save(dirs["csr"])
    m3 = family_dir(root, "xlm-roberta", "AutoModel", seed=3)
    torch.manual_seed(5)
    linear = torch.nn.Linear(36, 1)
    torch.nn.init.normal_(linear.weight, std=0.5)  # about half the positions positive, the rest dropped by relu
    torch.save(linear.state_dict(), m3 / "sparse_linear.pt")
    dirs["bge-m3"], dirs["mlm"] = str(m3), mlm
    return dirs
