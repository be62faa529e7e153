"""Runs own their directory: locks, refusals, --overwrite that keeps the old run until the new one has a
checkpoint, fingerprints checked on resume, hyperparameter changes refused unless applied; files honour the
umask; a full disk names the checkpoint and keeps the previous one."""

import json
import os
import stat

import pytest
import torch

from bertkit.data.shards import PretrainingDataset
from bertkit.io import atomic_write_text
from bertkit.resources import austen_novels
from bertkit.tasks.pretraining import pretrain, pretrain_from_text
from bertkit.training import TrainingConfig, load_checkpoint
from bertkit.training.checkpoint import latest_checkpoint, save_checkpoint
from bertkit.training.rundir import RunDirectory, RunDirectoryError

TINY = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=37)


def _training(**changes) -> TrainingConfig:
    base = dict(max_steps=6, batch_size=8, learning_rate=1e-3, log_every=2, save_every=3, progress_bar=False,
                precision="fp32")
    return TrainingConfig(**{**base, **changes})


@pytest.fixture(scope="module")
def book(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "persuasion.txt"
    path.write_text(austen_novels()["persuasion"][:120_000], encoding="utf-8")
    return path


def _from_text(book, out, **kwargs):
    kwargs.setdefault("training", _training())
    return pretrain_from_text([book], out, vocab_size=500, max_seq_length=32, progress=False, model_overrides=TINY,
                              **kwargs)


def test_a_second_run_into_a_locked_directory_fails_naming_the_holder(tmp_path):
    with RunDirectory(tmp_path / "run"), pytest.raises(RunDirectoryError, match=rf"in use by another run \(pid "
                                                                                 rf"{os.getpid()} on "):
        RunDirectory(tmp_path / "run").open()
    with RunDirectory(tmp_path / "run"):  # released on close
        pass


def test_a_directory_holding_a_run_needs_resume_or_overwrite(book, tmp_path):
    out = tmp_path / "run"
    first = _from_text(book, out)
    with pytest.raises(RunDirectoryError,
                       match=r"already holds a run \(pretraining, created .*\); pass --resume.*--overwrite"):
        _from_text(book, out)
    # with checkpoints/ deleted the run's model is still protected
    import shutil

    shutil.rmtree(out / "checkpoints")
    before = (first.model_dir / "model.safetensors").read_bytes()
    with pytest.raises(RunDirectoryError, match="already holds a run"):
        _from_text(book, out)
    assert (first.model_dir / "model.safetensors").read_bytes() == before
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(RunDirectoryError, match="not empty and holds no bertkit run"):
        _from_text(book, foreign)
    with pytest.raises(RunDirectoryError, match="alternatives"):
        RunDirectory(out, resume=True, overwrite=True)


def test_overwrite_keeps_the_old_run_until_the_new_one_has_a_checkpoint(book, tmp_path):
    out = tmp_path / "run"
    _from_text(book, out)
    old_model = (out / "model" / "model.safetensors").read_bytes()

    def fail(trainer):
        raise RuntimeError("stopped before the first checkpoint")

    with pytest.raises(RuntimeError, match="before the first checkpoint"):
        _from_text(book, out, overwrite=True, callbacks={"on_step_end": fail})
    assert (out / "model" / "model.safetensors").read_bytes() == old_model
    assert not (tmp_path / ".run.overwrite").exists()

    result = _from_text(book, out, overwrite=True, training=_training(seed=7))
    assert result.output_dir == out.absolute()
    assert (out / "model" / "model.safetensors").read_bytes() != old_model
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-00000003", "step-00000006"]
    assert not any(p.name.startswith(".run.") for p in tmp_path.iterdir())


def test_resume_with_text_reuses_tokenizer_and_data_and_checks_the_text(book, tmp_path):
    out = tmp_path / "run"
    _from_text(book, out)
    data = out / "data" / "train"
    stamps = {p.name: p.stat().st_mtime_ns for p in data.rglob("*") if p.is_file()}
    _from_text(book, out, resume=True, training=_training(max_steps=9), apply_changes=True)
    assert {p.name: p.stat().st_mtime_ns for p in data.rglob("*") if p.is_file()} == stamps
    assert json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 9

    changed = book.parent / "changed.txt"
    changed.write_text(book.read_text(encoding="utf-8") + "\nOne more line.\n", encoding="utf-8")
    with pytest.raises(RunDirectoryError, match=r"its text differs.*files"):
        pretrain_from_text([changed], out, vocab_size=500, max_seq_length=32, progress=False, model_overrides=TINY,
                           training=_training(max_steps=9), resume=True)
    with pytest.raises(RunDirectoryError, match=r"settings.vocab_size: 500 -> 600"):
        pretrain_from_text([book], out, vocab_size=600, max_seq_length=32, progress=False, model_overrides=TINY,
                           training=_training(max_steps=9), resume=True)


def test_resume_against_other_data_or_model_is_refused(book, tmp_path):
    out = tmp_path / "run"
    result = _from_text(book, out)
    train_dir = out / "data" / "train"
    with pytest.raises(RunDirectoryError, match=r"its data differs"):
        pretrain(out / "data" / "heldout", out, model_overrides=TINY, training=_training(), resume=True)
    with pytest.raises(RunDirectoryError, match=r"its model differs.*hidden_size: 32 -> 48"):
        pretrain(train_dir, out, model_overrides={**TINY, "hidden_size": 48}, training=_training(), resume=True,
                 eval_data_dir=out / "data" / "heldout")
    assert result.model_dir.exists()


def test_changed_hyperparameters_on_resume_are_refused_unless_applied(book, tmp_path):
    out = tmp_path / "run"
    _from_text(book, out, training=_training(max_steps=6))
    with pytest.raises(ValueError, match=r"other hyperparameters: learning_rate: 0\.001 -> 0\.005.*--apply-changes"):
        _from_text(book, out, resume=True, training=_training(max_steps=6, learning_rate=5e-3))
    _from_text(book, out, resume=True, training=_training(max_steps=10, learning_rate=5e-3),
               apply_changes=True)
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    lr_at = {line["step"]: line["lr"] for line in lines if line.get("split") == "train"}
    # linear decay to 0 at step 10 from the new peak 5e-3: the update after step 7 used 5e-3 * 3/10
    assert lr_at[8] == pytest.approx(5e-3 * (10 - 7) / 10)


def test_files_honour_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "a.json", "{}")
        save_checkpoint(tmp_path, 1, torch.nn.Linear(2, 2), {"x": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o640
    step = tmp_path / "checkpoints" / "step-00000001"
    assert stat.S_IMODE(step.stat().st_mode) == 0o750
    assert stat.S_IMODE((step / "state.pt").stat().st_mode) == 0o640


def test_reading_the_umask_never_changes_it(monkeypatch):
    from bertkit.io import umask

    old = os.umask(0o027)
    try:
        seen = []
        monkeypatch.setattr(os, "umask", lambda mask: seen.append(mask) or 0o027)
        assert umask() == 0o027  # from /proc/self/status: a thread creating a file meanwhile is unaffected
        assert seen == [] or not os.path.exists("/proc/self/status")
    finally:
        monkeypatch.undo()
        os.umask(old)


def test_disk_full_names_the_checkpoint_and_keeps_the_previous_one(tmp_path, monkeypatch):
    model = torch.nn.Linear(3, 3)
    save_checkpoint(tmp_path, 1, model, {"step": 1})

    def full_disk(obj, path):  # what torch.save raises when the device is full (seen on a full tmpfs)
        with open(path, "wb") as f:
            f.write(b"PK\x03\x04partial")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(OSError, match=r"checkpoint .*step-00000002 was not written: could not write .*state\.pt: "
                                      r"no space left on the device .*previous checkpoint .*step-00000001 is intact"):
        save_checkpoint(tmp_path, 2, model, {"step": 2})
    monkeypatch.undo()
    assert latest_checkpoint(tmp_path).name == "step-00000001"
    assert load_checkpoint(latest_checkpoint(tmp_path), model) == {"step": 1}
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step-00000001"]


def test_reproducible_data_creation_and_collator_from_the_seed(book, tmp_path):
    a = _from_text(book, tmp_path / "a", training=_training(seed=3))
    b = _from_text(book, tmp_path / "b", training=_training(seed=3))
    for name in ("vocab.txt",):
        assert (a.model_dir / name).read_bytes() == (b.model_dir / name).read_bytes()
    assert (a.model_dir / "model.safetensors").read_bytes() == (b.model_dir / "model.safetensors").read_bytes()
    da, db = PretrainingDataset(a.output_dir / "data" / "train"), PretrainingDataset(b.output_dir / "data" / "train")
    assert all((x == y).all() for x, y in zip(da.token_arrays(), db.token_arrays(), strict=True))


def test_a_run_that_wrote_nothing_but_run_json_leaves_nothing_to_refuse(tmp_path):
    """A run that failed (or was killed) before its first step wrote run.json alone; it claimed the directory."""
    from bertkit.training.rundir import holds_run

    out = tmp_path / "run"
    with RunDirectory(out) as run:
        run.check("data", {"train": [{"name": "a.tsv", "bytes": 3}]})
        run.save()  # then the run failed: no step, no checkpoint
    assert not holds_run(out)
    with RunDirectory(out) as run:  # the corrected command, without --resume or --overwrite
        run.check("data", {"train": [{"name": "a.tsv", "bytes": 5}]})
        run.save()
        (out / "metrics.jsonl").write_text('{"split": "train", "step": 1}\n')  # this one took a step
    assert holds_run(out)
    with pytest.raises(RunDirectoryError, match="already holds a run"):
        RunDirectory(out).open()
    with RunDirectory(out, resume=True) as run, pytest.raises(
            RunDirectoryError, match=r"its data differs from this one's \(then -> now\): train\[0\] \(a\.tsv\)\.bytes: "
                                     r"5 -> 7"):
        run.check("data", {"train": [{"name": "a.tsv", "bytes": 7}]})


def _listing(directory):
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def test_a_refused_directory_of_the_users_files_is_left_exactly_as_it_was(tmp_path):
    """No ``.lock`` stays in a directory the run did not take: refused, or replaced by an --overwrite run that
    failed before its first checkpoint."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(RunDirectoryError, match="not empty and holds no bertkit run"):
        RunDirectory(mine).open()
    assert _listing(mine) == {"notes.txt": b"mine"}
    with RunDirectory(mine, overwrite=True) as run:
        assert run.path != run.final  # built aside; the run fails before its commit
    assert _listing(mine) == {"notes.txt": b"mine"}
    old = tmp_path / "old"  # a run of a bertkit without run.json or .lock
    (old / "model").mkdir(parents=True)
    with pytest.raises(RunDirectoryError, match="already holds a run"):
        RunDirectory(old).open()
    assert sorted(p.name for p in old.iterdir()) == ["model"]


def test_a_run_whose_only_record_is_its_step_0_evaluation_leaves_nothing_to_refuse(tmp_path):
    """A run that evaluated at step 0 and then failed on its data never trained: its retry needs no --overwrite,
    and --resume starts it afresh."""
    from bertkit.training.rundir import holds_run

    out = tmp_path / "run"
    with RunDirectory(out) as run:
        run.save()
        (out / "metrics.jsonl").write_text('{"split": "eval", "step": 0, "accuracy": 0.5}\n')
    assert not holds_run(out)
    with RunDirectory(out):  # the corrected command, as it was typed
        pass
    with RunDirectory(out, resume=True) as run:
        assert not run.resumed
    (out / "metrics.jsonl").write_text('{"split": "eval", "step": 0}\n{"split": "train", "step": 1}\n')
    with pytest.raises(RunDirectoryError, match="already holds a run"):
        RunDirectory(out).open()
    (out / "metrics.jsonl").unlink()
    (out / "run.json").write_text('{"mine": true}')  # not bertkit's run.json: the directory is not bertkit's run
    with pytest.raises(RunDirectoryError, match="already holds a run"):
        RunDirectory(out).open()



def test_a_pretraining_run_that_failed_before_its_first_step_does_not_block_the_corrected_command(book, tmp_path):
    """Its run.json and the data it built stay, but claim nothing: the corrected command (other text) builds its
    own data in the same directory, without --overwrite."""
    out = tmp_path / "run"

    def fail(trainer):
        raise RuntimeError("stopped before the first step")

    with pytest.raises(RuntimeError, match="before the first step"):
        _from_text(book, out, callbacks={"on_train_begin": fail}, training=_training(max_steps=2))
    assert (out / "data").is_dir()
    other = tmp_path / "other.txt"
    other.write_text(book.read_text(encoding="utf-8")[:60_000], encoding="utf-8")
    result = _from_text(other, out, training=_training(max_steps=2, save_every=2))
    assert (result.model_dir / "model.safetensors").is_file()
    assert json.loads((out / "run.json").read_text())["text"]["files"][0]["name"] == "other.txt"
