"""Fine-tuning's validation under DDP (2 gloo processes via torchrun): each rank runs its share of the features
and every rank gets every output, equal to one process running them all.

Run as a script (``torchrun ... tests/test_finetune_ddp.py OUT``) it is the worker of the test.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

FEATURES = 13  # odd: the ranks' shares differ in size (7 and 6)


def test_validation_is_shared_between_ranks_and_equals_one_process(tmp_path):
    from conftest import run_torchrun

    result = run_torchrun(__file__, str(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["rows"] for r in ranks] == [7, 6]  # each rank ran its share only
    for r in ranks:
        assert r["outputs"] == FEATURES and r["max_diff"] <= 1e-6 and abs(r["loss_diff"]) <= 1e-6, r


def _worker(out: Path) -> None:
    """Both ranks build the same tiny classifier and features, run them sharded (counting the rows each
    forward sees) and whole, and write what they got."""
    from bertkit import BERTConfig, BERTForSequenceClassification, BERTTokenizerFast
    from bertkit.resources import BERT_BASE_UNCASED_VOCAB
    from bertkit.tasks.classification import Classification, TextExample
    from bertkit.tasks.finetuning import run_model
    from bertkit.training.distributed import cleanup, init_distributed

    torch.set_num_threads(1)
    ctx = init_distributed("cpu")
    tokenizer = BERTTokenizerFast(BERT_BASE_UNCASED_VOCAB)
    text = "emma was handsome clever and rich with a comfortable home and happy disposition"
    examples = [TextExample(text[:10 + 5 * i], None, ("pos", "neg")[i % 2], i + 1) for i in range(FEATURES)]
    task = Classification()
    task.fit(examples)
    features = task.featurize(examples, tokenizer, 32)
    torch.manual_seed(0)
    model = BERTForSequenceClassification(BERTConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=24, num_labels=2)).eval()
    rows = []
    def count(module, args, kwargs):
        rows.append((args[0] if args else kwargs["input_ids"]).shape[0])

    hook = model.register_forward_pre_hook(count, with_kwargs=True)
    sharded, sharded_loss = run_model(model, task, features, batch_size=4, ctx=ctx)
    hook.remove()
    whole, whole_loss = run_model(model, task, features, batch_size=4)
    diff = max(float(abs(a - b).max()) for a, b in zip(sharded, whole))
    (out / f"rank{ctx.rank}.json").write_text(json.dumps({
        "rows": sum(rows), "outputs": sum(o is not None for o in sharded), "max_diff": diff,
        "loss_diff": sharded_loss - whole_loss}))
    cleanup()


if __name__ == "__main__":
    _worker(Path(sys.argv[1]))
