"""Several pretraining data directories mixed with weights: parsing ``--data``, the mixed dataset and what it
refuses, :class:`MixtureSampler`, a weighted DDP run (2 gloo processes) resumed mid-epoch, and the CLI.

Run as a script (``torchrun ... tests/test_data_mixture.py ROOT PHASE``) it is the DDP test's worker.
"""

from __future__ import annotations

import collections
import json
import os
import sys
from pathlib import Path

import pytest
import torch

WORDS = ["the", "story", "number", "begins", "here", ".", "then", "ends", "river", "hill", "lake"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *map(str, range(40))]
TINY_MODEL = dict(num_hidden_layers=1, hidden_size=16, num_attention_heads=2, intermediate_size=32)
#: the DDP run: river (12 instances) weighted 1, hill (20) weighted 3; 32 per epoch, 4 per step, 2 epochs
RIVER, HILL, BATCH, SEED, STOP, STEPS = 12, 20, 4, 5, 5, 16


def tokenizer(vocab=VOCAB, **settings):
    from bertkit import BERTTokenizerFast

    return BERTTokenizerFast(vocab=vocab, **settings)


def make_data(root: Path, word: str, count: int, *, name: str | None = None, tok=None, max_seq_length: int = 32,
              static: bool = False) -> Path:
    """``count`` one-instance documents ``the WORD story number I begins here . / then WORD I ends .``: every
    instance is told apart by its word and number."""
    from bertkit.data import create_pretraining_data

    docs = [f"the {word} story number {i} begins here .\nthen {word} {i} ends ." for i in range(count)]
    return create_pretraining_data(["\n\n".join(docs)], tok or tokenizer(), root / (name or word),
                                   max_seq_length=max_seq_length, short_seq_prob=0.0, random_next_prob=0.0,
                                   static_masking=static, format="google", progress=False)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mix")
    return {"river": make_data(root, "river", RIVER), "hill": make_data(root, "hill", HILL), "root": root}


# ------------------------------------------------------------------ parsing --data
def test_entries_parse_into_paths_and_weights(dirs, tmp_path):
    from bertkit.data.mixture import parse_data_specs

    river, hill = dirs["river"], dirs["hill"]
    specs = parse_data_specs([f"{river}:0.7", f"{hill}:3e-1"])
    assert [(s.path, s.weight) for s in specs] == [(river, 0.7), (hill, 0.3)]
    assert [(s.path, s.weight) for s in parse_data_specs(str(river))] == [(river, None)]
    assert [(s.path, s.weight) for s in parse_data_specs([(river, 2), (hill, 1.5)])] == [(river, 2.0), (hill, 1.5)]
    colon = tmp_path / "with:2"
    colon.mkdir()
    assert [(s.path, s.weight) for s in parse_data_specs([str(colon)])] == [(colon, None)]  # the directory wins
    assert [(s.path, s.weight) for s in parse_data_specs([f"{colon}:0.5"])] == [(colon, 0.5)]


@pytest.mark.parametrize("entries, named, says", [
    (["{river}:abc"], "{river}:abc", "a weight after the last colon must be a number"),
    (["{river}:0", "{hill}:1"], "{river}:0", "must be a positive"),
    (["{river}:-0.5", "{hill}:1"], "{river}:-0.5", "must be a positive"),
    (["{river}:nan", "{hill}:1"], "{river}:nan", "must be a positive, finite"),
    ([("{river}", "0.5"), "{hill}:1"], "{river}:0.5", "is not a number"),
    (["{river}:0.7", "{hill}"], "{hill}", "mixes weighted entries"),
    (["{river}:0.7", "{root}/nope:0.3"], "{root}/nope:0.3", "no such directory"),
    (["{river}", "{river}"], "{river}", "names one directory twice"),
    ([":0.5"], ":0.5", "names no directory"),
    (["{river}:1e308", "{hill}:1e-308"], "{hill}:1e-308", "too small next to {river}:1e308"),
    (["{river}/index.json"], "{river}/index.json", "is not a directory"),
])
def test_bad_entries_are_refused_naming_the_entry(dirs, entries, named, says):
    from bertkit.data.mixture import parse_data_specs

    with pytest.raises(ValueError) as error:
        parse_data_specs([(entry[0].format(**dirs), entry[1]) if isinstance(entry, tuple) else entry.format(**dirs)
                          for entry in entries])
    message = str(error.value)
    assert message.startswith("--data") and named.format(**dirs) in message and says.format(**dirs) in message, message


def test_one_directory_or_no_weights_keeps_the_plain_dataset_and_sampler(dirs):
    from bertkit.data import MixedPretrainingDataset, PretrainingDataset, open_pretraining_data
    from bertkit.tasks.pretraining import _sampler_factory, data_fingerprint

    river, hill = dirs["river"], dirs["hill"]
    for one in (river, str(river), [f"{river}:0.3"]):
        assert type(open_pretraining_data(one)) is PretrainingDataset
    assert set(data_fingerprint(PretrainingDataset(river))) == {"num_instances", "index_sha256"}  # as before
    plain = open_pretraining_data([river, hill])
    assert isinstance(plain, MixedPretrainingDataset) and plain.weights is None and len(plain) == RIVER + HILL
    assert _sampler_factory(plain) is None and _sampler_factory(PretrainingDataset(river)) is None
    weighted = open_pretraining_data([f"{river}:1", f"{hill}:3"])
    assert weighted.weights == [0.25, 0.75] and weighted.sizes == [RIVER, HILL]
    assert open_pretraining_data([f"{river}:1e308", f"{hill}:1e308"]).weights == [0.5, 0.5]  # no overflow
    assert _sampler_factory(weighted)(RIVER + HILL, seed=0, rank=0, world_size=1).counts() == [8, 24]


# ------------------------------------------------------------------ the mixed dataset
def test_mixed_dataset_concatenates_and_offers_what_training_uses(dirs):
    from bertkit.data import MixedPretrainingDataset, PretrainingDataset

    river, hill = PretrainingDataset(dirs["river"]), PretrainingDataset(dirs["hill"])
    mix = MixedPretrainingDataset([dirs["river"], dirs["hill"]], weights=[2, 6])
    assert mix.weights == [0.25, 0.75] and mix.data_dirs == [dirs["river"], dirs["hill"]]
    assert torch.equal(mix[RIVER + 3]["input_ids"], hill[3]["input_ids"])
    assert torch.equal(mix[RIVER - 1]["input_ids"], river[RIVER - 1]["input_ids"])
    assert mix.index["num_instances"] == RIVER + HILL
    assert mix.index["num_tokens"] == river.index["num_tokens"] + hill.index["num_tokens"]
    assert mix.max_seq_length == 32 and not mix.static_masking
    assert mix.load_tokenizer().vocab == river.load_tokenizer().vocab
    assert sum(len(tokens) for tokens in mix.token_arrays()) == mix.index["num_tokens"]
    batch = mix.collator(generator=torch.Generator().manual_seed(0))([mix[0], mix[RIVER]])
    assert batch["input_ids"].shape[0] == 2 and (batch["mlm_labels"] != -100).any()


@pytest.mark.parametrize("other, says", [
    (dict(max_seq_length=24), "max_seq_length is 32 in"),
    (dict(static=True), "static_masking is False in"),
    (dict(tok="cased"), "tokenizer.do_lower_case is True in"),
    (dict(tok="renamed"), "the vocabularies hold different tokens"),
    (dict(tok="larger"), "vocab_size is 56 in"),
])
def test_directories_that_cannot_share_a_model_are_refused(dirs, tmp_path, other, says):
    from bertkit.data import MixedPretrainingDataset

    toks = {"cased": lambda: tokenizer(do_lower_case=False),
            "renamed": lambda: tokenizer([*VOCAB[:-1], "99"]),  # same size, one other token
            "larger": lambda: tokenizer([*VOCAB, "extra"])}
    if "tok" in other:
        other = {**other, "tok": toks[other["tok"]]()}
    lake = make_data(tmp_path, "lake", 6, **other)
    with pytest.raises(ValueError) as error:
        MixedPretrainingDataset([dirs["river"], lake])
    message = str(error.value)
    assert f"--data cannot mix {dirs['river']} and {lake}" in message and says in message, message


# ------------------------------------------------------------------ MixtureSampler
def by_dataset(order: torch.Tensor, sizes: list[int]) -> list[list[int]]:
    """The local indices of each dataset among ``order``'s global indices, in order."""
    ends = torch.tensor(sizes).cumsum(0)
    found: list[list[int]] = [[] for _ in sizes]
    for index in order.tolist():
        d = int((ends <= index).sum())
        found[d].append(index - (int(ends[d - 1]) if d else 0))
    return found


def test_each_epoch_draws_the_largest_remainder_shares():
    from bertkit.training import MixtureSampler

    sizes, weights = [5, 7, 11], [1, 2, 4]  # 23 * (1, 2, 4) / 7 = 3.29, 6.57, 13.14: the one left goes to 6.57
    sampler = MixtureSampler(23, seed=1, sizes=sizes, weights=weights)
    assert sampler.counts() == [3, 7, 13]
    for epoch in range(4):
        sampler.set_epoch(epoch)
        assert [len(picks) for picks in by_dataset(sampler.epoch_order(), sizes)] == [3, 7, 13]


def test_a_down_weighted_dataset_repeats_nothing_before_all_of_it_was_used():
    from bertkit.training import MixtureSampler

    sizes = [12, 36]
    sampler = MixtureSampler(48, seed=3, sizes=sizes, weights=[1, 7])  # 6 of the 12 each epoch, 42 of the 36
    assert sampler.counts() == [6, 42]
    small, so_far = [], [collections.Counter(), collections.Counter()]
    for epoch in range(6):
        sampler.set_epoch(epoch)
        picks = by_dataset(sampler.epoch_order(), sizes)
        small.append(picks[0])
        for d, size in enumerate(sizes):  # after every epoch each instance was used q or q + 1 times
            so_far[d].update(picks[d])
            uses = [so_far[d][i] for i in range(size)]
            assert max(uses) - min(uses) <= 1, (epoch, d, uses)
    for first in range(0, 6, 2):  # every two epochs are one pass over the 12: the first shows half, the next the rest
        assert sorted(small[first] + small[first + 1]) == list(range(12))
    assert small[0] != small[2]  # each pass is another permutation


def test_the_order_depends_on_seed_and_epoch_only():
    from bertkit.training import MixtureSampler

    def order(seed: int, epoch: int) -> list[int]:
        sampler = MixtureSampler(32, seed=seed, sizes=[RIVER, HILL], weights=[1, 3])
        sampler.set_epoch(epoch)
        return sampler.epoch_order().tolist()

    assert order(0, 2) == order(0, 2)
    assert order(0, 2) != order(0, 3) and order(0, 2) != order(1, 2)
    mixed = by_dataset(torch.tensor(order(0, 0)), [RIVER, HILL])
    assert sorted(mixed[0]) != mixed[0] or sorted(mixed[1]) != mixed[1]  # shuffled within datasets
    assert order(0, 0)[:8] != sorted(order(0, 0))[:8]  # and across them


def test_ranks_take_disjoint_strided_shares_of_the_truncated_order():
    from bertkit.training import MixtureSampler

    world, sizes = 5, [12, 36]  # 48 = 5 * 9 + 3: the last 3 are dropped
    whole = MixtureSampler(48, seed=2, sizes=sizes, weights=[1, 7])
    whole.set_epoch(1)
    order = whole.epoch_order().tolist()
    shares = []
    for rank in range(world):
        sampler = MixtureSampler(48, seed=2, rank=rank, world_size=world, sizes=sizes, weights=[1, 7])
        sampler.set_epoch(1)
        shares.append(list(sampler))
        assert len(shares[-1]) == len(sampler) == 9
    assert [shares[rank][k] for k in range(9) for rank in range(world)] == order[:45]


def test_state_dict_resumes_exactly_and_refuses_another_mix():
    from bertkit.training import MixtureSampler, SeededSampler

    def sampler(**changes):
        return MixtureSampler(**{"num_examples": 32, "seed": 4, "rank": 1, "world_size": 2, "sizes": [RIVER, HILL],
                                 "weights": [1, 3], **changes})

    first = sampler()
    first.set_epoch(3)
    taken = []
    for index in first:
        taken.append(index)
        if len(taken) == 5:
            state = first.state_dict()
            break
    assert json.loads(json.dumps(state)) == state  # primitives only
    assert state["position"] == 5 and state["sizes"] == [RIVER, HILL] and state["weights"] == [0.25, 0.75]
    resumed = sampler()
    resumed.load_state_dict(state)
    assert taken + list(resumed) == first.indices().tolist()
    resumed.set_epoch(4)
    first.set_epoch(4)
    assert list(resumed) == list(first)
    with pytest.raises(ValueError, match=r"weights \[0\.25, 0\.75\], this sampler \[0\.5, 0\.5\]"):
        sampler(weights=[1, 1]).load_state_dict(state)
    with pytest.raises(ValueError, match=r"sizes \[12, 20\], this sampler \[20, 12\]"):
        sampler(sizes=[HILL, RIVER]).load_state_dict(state)
    with pytest.raises(ValueError, match="sizes None"):  # a one-directory run's state
        sampler().load_state_dict(SeededSampler(32, seed=4, rank=1, world_size=2).state_dict())


# ------------------------------------------------------------------ a weighted DDP run, resumed mid-epoch
def test_weighted_ddp_run_resumed_mid_epoch_consumes_every_position_once(dirs):
    from bertkit.data import PretrainingDataset
    from bertkit.training import MixtureSampler
    from conftest import run_torchrun

    root = dirs["root"]
    for phase in ("first", "second"):
        result = run_torchrun(__file__, str(root), phase)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    seen = {r: [json.loads((root / f"{phase}-rank{r}.json").read_text()) for phase in ("first", "second")]
            for r in (0, 1)}
    assert [len(seen[r][0]) for r in (0, 1)] == [STOP, STOP]  # micro-batches before the stop: mid-epoch 0
    # which (directory, instance) each recorded row was, told by its tokens
    parts = [PretrainingDataset(dirs["river"]), PretrainingDataset(dirs["hill"])]
    known = {tuple(part[i]["input_ids"].tolist()): (d, i) for d, part in enumerate(parts) for i in range(len(part))}
    assert len(known) == RIVER + HILL
    offsets = [0, RIVER]
    consumed = {r: [offsets[d] + i for batch in seen[r][0] + seen[r][1] for d, i in map(known.__getitem__,
                                                                                           map(tuple, batch))]
                for r in (0, 1)}
    per_epoch = (RIVER + HILL) // 2
    sampler = MixtureSampler(RIVER + HILL, seed=SEED, sizes=[RIVER, HILL], weights=[1, 3])
    river_seen = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        order = sampler.epoch_order().tolist()
        ranks = [consumed[r][epoch * per_epoch:(epoch + 1) * per_epoch] for r in (0, 1)]
        assert ranks == [order[0::2], order[1::2]]  # each position of the epoch once: no repeat, no skip
        counts = collections.Counter("river" if index < RIVER else "hill" for index in ranks[0] + ranks[1])
        assert counts == {"river": 8, "hill": 24}  # 32 * (1/4, 3/4)
        river_seen.append([index for index in ranks[0] + ranks[1] if index < RIVER])
    assert len(set(river_seen[0])) == 8 and set(range(RIVER)) - set(river_seen[0]) <= set(river_seen[1])


def _worker(root: Path, phase: str) -> None:
    """Pretrain on river:1 hill:3 with 2 ranks (to step STOP, or resumed to STEPS) and write each rank's
    micro-batches as the original token ids of their rows."""
    from bertkit import BERTForPreTraining
    from bertkit.tasks.pretraining import pretrain
    from bertkit.training import TrainingConfig
    from bertkit.training.distributed import cleanup

    torch.set_num_threads(1)
    rows: list[list[list[int]]] = []
    training_step = BERTForPreTraining.training_step

    def recording(self, batch):
        original = torch.where(batch["mlm_labels"] != -100, batch["mlm_labels"], batch["input_ids"])
        rows.append([ids[:int(n)].tolist() for ids, n in zip(original, batch["attention_mask"].sum(1))])
        return training_step(self, batch)

    BERTForPreTraining.training_step = recording
    second = phase == "second"
    training = TrainingConfig(max_steps=STEPS if second else STOP, batch_size=BATCH, learning_rate=1e-3,
                              warmup_steps=0, log_every=4, precision="fp32", device="cpu", seed=SEED,
                              progress_bar=False)
    pretrain([f"{root / 'river'}:1", f"{root / 'hill'}:3"], root / "run", model_overrides=TINY_MODEL,
             training=training, resume=second, apply_changes=second)
    (root / f"{phase}-rank{os.environ['RANK']}.json").write_text(json.dumps(rows))
    cleanup()


# ------------------------------------------------------------------ the CLI
def test_cli_trains_on_weighted_directories_and_refuses_other_weights_on_resume(dirs, tmp_path, capsys):
    from bertkit.cli import main

    river, hill, out = dirs["river"], dirs["hill"], tmp_path / "run"
    common = ["--model", "tiny", "-o", str(out), "--batch-size", "4", "--precision", "fp32", "--log-every", "1"]
    heldout = make_data(tmp_path, "lake", 8)
    assert main(["pretrain", "--data", f"{river}:0.7", f"{hill}:0.3", "--eval-data", str(heldout), "--max-steps", "2",
                 *common]) == 0
    assert "unigram_accuracy_masked" in capsys.readouterr().out  # the unigram baseline counts both directories
    run = json.loads((out / "run.json").read_text())
    assert run["data"]["train"]["weights"] == [0.7, 0.3] and len(run["data"]["train"]["directories"]) == 2
    code = main(["pretrain", "--data", f"{river}:0.5", f"{hill}:0.5", "--eval-data", str(heldout), "--max-steps", "2",
                 "--resume", *common])
    error = capsys.readouterr().err
    assert code == 1 and "train.weights[0]: 0.7 -> 0.5; train.weights[1]: 0.3 -> 0.5" in error, error
    code = main(["pretrain", "--data", f"{river}:0.7", str(hill), "--max-steps", "2", "--resume", *common])
    assert code == 1 and "--data mixes weighted entries" in capsys.readouterr().err


def test_cli_refuses_an_output_inside_a_mixed_input(dirs, capsys):
    from bertkit.cli import main

    river, hill = dirs["river"], dirs["hill"]
    code = main(["pretrain", "--data", f"{river}:0.7", f"{hill}:0.3", "-o", str(hill), "--max-steps", "1"])
    assert code == 1 and "--data" in capsys.readouterr().err


if __name__ == "__main__":
    _worker(Path(sys.argv[1]), sys.argv[2])
