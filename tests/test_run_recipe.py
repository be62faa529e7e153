"""The one run (bertkit.training.run): a tiny recipe through run_recipe — the best evaluation's model kept,
early stopping, a resumed run that keeps its best and its patience, results.json and the plot written once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

import bertkit.training.run as run_module
from bertkit.training import TrainingConfig
from bertkit.training.eval_schedule import BestModel, EvalSchedule, greater_is_better
from bertkit.training.run import Recipe, TrainingData, epoch_bookkeeping, run_recipe


class Line(nn.Module):
    """y = w x + b, trained on squared error."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(1, 1)

    def training_step(self, batch):
        loss = ((self.linear(batch["x"]) - batch["y"]) ** 2).mean()
        return loss, {}


class Scripted(Recipe):
    """A recipe whose evaluation reads its score from ``scores`` (step -> value) and remembers the weights it
    scored at each step; ``save`` / ``load`` a file of the weights."""

    evaluation_data = "scores (Scripted(scores=...))"

    def __init__(self, scores: dict[int, float] | None, rows: int = 16):
        self.scores, self.rows = scores, rows
        self.weights_at: dict[int, dict[str, torch.Tensor]] = {}
        self.saved = 0

    def start(self, run, config):
        torch.manual_seed(config.seed)
        self.model = Line()

    def checks(self):
        return {"model": {"kind": "line"}}

    def steps_per_epoch(self, config):
        return self.rows // config.batch_size

    def training_data(self, config):
        xs = torch.linspace(-1, 1, self.rows)
        data = [{"x": x.reshape(1), "y": (3 * x + 1).reshape(1)} for x in xs]
        return TrainingData(data, collate_fn=lambda rows: {k: torch.stack([r[k] for r in rows]) for k in rows[0]})

    @property
    def evaluates(self):
        return self.scores is not None

    def evaluate(self, trainer):
        step = trainer.state.step
        self.weights_at[step] = {k: v.clone() for k, v in self.model.state_dict().items()}
        return {"score": self.scores[step], "loss": -self.scores[step], "table": {"a": 1}}

    def save(self, output: Path):
        (output / self.model_dir).mkdir(parents=True, exist_ok=True)
        torch.save(self.model.state_dict(), output / self.model_dir / "weights.pt")
        self.saved += 1

    def load(self, output: Path):
        self.model.load_state_dict(torch.load(output / self.model_dir / "weights.pt"))

    def finish(self, trainer, result):
        return {"final_step": trainer.state.step}


def config(**fields) -> TrainingConfig:
    return TrainingConfig(**{"epochs": 6, "batch_size": 4, "learning_rate": 0.1, "device": "cpu", "precision": "fp32",
                             "progress_bar": False, **fields})


SCORES = {4: 0.5, 8: 0.9, 12: 0.7, 16: 0.6, 20: 0.65, 24: 0.95}  # an evaluation per epoch of 4 steps


def evals(out: Path) -> list[dict]:
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["split"] == "eval"]


def test_the_best_evaluation_is_kept_and_loaded_back(tmp_path):
    recipe = Scripted(SCORES)
    result = run_recipe(recipe, config(keep_best="score"), output_dir=tmp_path / "run")
    assert result.best == {"metric": "score", "value": 0.95, "step": 24, "bad_evaluations": 0}
    recipe = Scripted({**SCORES, 24: 0.1})
    result = run_recipe(recipe, config(keep_best="score"), output_dir=tmp_path / "again")
    assert result.best["step"] == 8 and result.best["bad_evaluations"] == 4
    for name, value in recipe.model.state_dict().items():  # the model in hand is the step-8 one, not the last
        torch.testing.assert_close(value, recipe.weights_at[8][name], rtol=0, atol=0)
    assert recipe.saved == 2  # at step 4, at step 8: each improvement, never at the end
    assert [r["step"] for r in evals(result.output_dir)] == [4, 8, 12, 16, 20, 24]
    assert [r["epoch"] for r in evals(result.output_dir)] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert "table" not in evals(result.output_dir)[0]  # numbers only in metrics.jsonl


def test_a_loss_is_lower_is_better():
    assert greater_is_better("accuracy") and greater_is_better("ndcg@10")
    assert not greater_is_better("loss") and not greater_is_better("eval_loss")
    loss = BestModel("loss", greater_is_better("loss"), None)
    assert loss.update({"loss": 1.0}, 1) and loss.update({"loss": 0.5}, 2) and not loss.update({"loss": 0.7}, 3)


def test_loss_named_best_keeps_the_lowest(tmp_path):
    recipe = Scripted(SCORES)  # loss = -score: the lowest loss is the highest score
    result = run_recipe(recipe, config(keep_best="loss"), output_dir=tmp_path / "run")
    assert result.best["step"] == 24 and result.best["value"] == -0.95


def test_patience_stops_the_run(tmp_path):
    recipe = Scripted(SCORES)
    result = run_recipe(recipe, config(keep_best="score", patience=2), output_dir=tmp_path / "run")
    # best at 8; 12 and 16 are no better: the run stops after step 16, with a checkpoint there
    assert result.results == {"final_step": 16} and result.best["step"] == 8
    assert [r["step"] for r in evals(result.output_dir)] == [4, 8, 12, 16]
    assert json.loads((result.output_dir / "results.json").read_text()) == {"final_step": 16}


def test_eval_every_sets_the_schedule(tmp_path):
    scores = {step: step / 100 for step in range(1, 25)}
    result = run_recipe(Scripted(scores), config(epochs=1, eval_every=3), output_dir=tmp_path / "run")
    assert [r["step"] for r in evals(result.output_dir)] == [3, 4]  # every 3 steps, and the last one
    assert result.best == {}  # the recipe names no metric to keep: the last model


class Interrupted(Exception):
    pass


def test_a_resumed_run_keeps_its_best_and_its_patience(tmp_path):
    whole = Scripted(SCORES)
    uninterrupted = run_recipe(whole, config(keep_best="score", patience=3), output_dir=tmp_path / "whole")

    def crash(trainer):
        if trainer.state.step == 14:  # after the step-12 checkpoint: best at 8, one evaluation without improvement
            raise Interrupted

    with pytest.raises(Interrupted):
        run_recipe(Scripted(SCORES), config(keep_best="score", patience=3), output_dir=tmp_path / "part",
                   callbacks={"on_step_end": crash})
    resumed_recipe = Scripted(SCORES)
    resumed = run_recipe(resumed_recipe, config(keep_best="score", patience=3), output_dir=tmp_path / "part",
                         resume=True)
    assert resumed.best == uninterrupted.best == {"metric": "score", "value": 0.9, "step": 8, "bad_evaluations": 3}
    assert resumed.results == uninterrupted.results == {"final_step": 20}  # patience counted across the resume
    assert resumed_recipe.saved == 0  # the best (step 8) was saved before the interruption and is loaded back
    for name, value in resumed_recipe.model.state_dict().items():
        torch.testing.assert_close(value, whole.weights_at[8][name], rtol=0, atol=0)

    def steps(out):
        return [(r["step"], r["score"]) for r in evals(out)]
    assert steps(tmp_path / "part") == steps(tmp_path / "whole")


def test_results_and_plot_are_written_once(tmp_path, monkeypatch):
    plots, reports = [], []
    monkeypatch.setattr(run_module, "plot_metrics", lambda *args: plots.append(args))
    monkeypatch.setattr(run_module, "report_final", lambda trainer, results: reports.append(dict(results)))
    result = run_recipe(Scripted(SCORES), config(keep_best="score"), output_dir=tmp_path / "run")
    assert len(plots) == 1 and reports == [{"final_step": 24}]
    assert json.loads((result.output_dir / "results.json").read_text()) == {"final_step": 24}
    assert (result.model_dir / "weights.pt").is_file()
    info = json.loads((result.output_dir / "run.json").read_text())
    assert info["model"] == {"kind": "line"} and info["training"]["keep_best"] == "score"
    assert info["training"]["max_steps"] == 24 and info["training"]["keep_last"] == 1  # one epoch: 4 steps
    assert info["training"]["log_every"] == 1 and info["training"]["save_every"] == 4


def test_keep_best_and_patience_need_an_evaluation(tmp_path):
    for fields in ({"keep_best": "score"}, {"patience": 2, "keep_best": "score"}):
        with pytest.raises(ValueError, match=r"--keep-best / --patience\) .* add scores"):
            run_recipe(Scripted(None), config(**fields), output_dir=tmp_path / "none")
    with pytest.raises(ValueError, match=r"patience=2 \(--patience\) .* \(--keep-best METRIC\)"):
        run_recipe(Scripted(SCORES), config(patience=2), output_dir=tmp_path / "nameless")
    with pytest.raises(ValueError, match=r"keep_best='f1' \(--keep-best\) is not among .*'loss', 'score'"):
        run_recipe(Scripted(SCORES), config(keep_best="f1"), output_dir=tmp_path / "f1")


def test_the_config_checks_its_new_fields():
    for fields, match in (({"keep_best": ""}, "keep_best must be a metric name"),
                          ({"patience": 0}, "patience"), ({"epochs": 0}, "epochs must be a finite number > 0"),
                          ({"epochs": None}, "needs max_steps .* or epochs")):
        with pytest.raises(ValueError, match=match):
            TrainingConfig(**{"epochs": 1, **fields})
    assert TrainingConfig(max_steps=5).epochs is None


def test_epoch_bookkeeping_lives_once():
    fields = epoch_bookkeeping(TrainingConfig(epochs=2.5), 40).to_dict()
    assert {k: fields[k] for k in ("max_steps", "log_every", "save_every", "keep_last")} == {
        "max_steps": 100, "log_every": 10, "save_every": 40, "keep_last": 1}
    assert epoch_bookkeeping(TrainingConfig(max_steps=7, epochs=2.5), 400).max_steps == 7  # max_steps wins
    assert epoch_bookkeeping(TrainingConfig(epochs=1, save_every=3), 400).log_every == 50
    assert epoch_bookkeeping(TrainingConfig(epochs=1, save_every=3), 400).save_every == 3
    assert epoch_bookkeeping(TrainingConfig(epochs=2, log_every=7), 40, bookkeeping=False).to_dict()["log_every"] == 7
    with pytest.raises(ValueError, match="does not count epochs: give max_steps"):
        epoch_bookkeeping(TrainingConfig(epochs=2), None)


def test_a_schedule_state_of_another_metric_starts_afresh():
    schedule = EvalSchedule(keep_best="accuracy", patience=1)
    schedule.load_state_dict({"history": [], "best": {"metric": "f1", "value": 0.9, "step": 4, "bad_evaluations": 1}})
    assert schedule.best.value is None and not schedule.best.should_stop
    schedule.load_state_dict({"history": [{"step": 4, "metrics": {"accuracy": 0.5}}],
                              "best": {"metric": "accuracy", "value": 0.5, "step": 4, "bad_evaluations": 1}})
    assert schedule.best.should_stop and schedule.history[0]["step"] == 4


@pytest.mark.parametrize("objective", ["mlm", "electra"])
def test_pretraining_keeps_its_best_held_out_model(tmp_path, objective):
    """keep_best on pretraining: the Trainer's held-out evaluations pick the model saved (ELECTRA: discriminator and
    generator), and patience stops the run."""
    from safetensors.torch import load_file

    from bertkit.resources import austen_novels
    from bertkit.tasks.pretraining import pretrain_from_text

    text = tmp_path / "p.txt"
    text.write_text(austen_novels()["persuasion"][:40_000], encoding="utf-8")
    seen = {}

    def capture(trainer):
        seen[trainer.state.step] = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}

    training = TrainingConfig(max_steps=12, batch_size=8, learning_rate=3e-2, warmup_steps=1, eval_every=2,
                              keep_best="loss", patience=2, progress_bar=False, precision="fp32", device="cpu")
    result = pretrain_from_text([text], tmp_path / "run", model="tiny", vocab_size=600, max_seq_length=32,
                                heldout_every=5, training=training, progress=False, objective=objective,
                                model_overrides=dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                                                     intermediate_size=37), callbacks={"on_evaluate": capture})
    losses = {r["step"]: r["loss"] for r in evals(result.output_dir)}
    best = min(losses, key=losses.get)
    assert result.best["step"] == best and result.best["value"] == losses[best]
    assert max(losses) == best + 2 * result.best["bad_evaluations"]
    kept = seen[best]
    parts = {"model": "discriminator.", "generator": "generator."} if objective == "electra" else {"model": ""}
    for directory, prefix in parts.items():
        saved = load_file(result.output_dir / directory / "model.safetensors")
        names = [k for k in kept if k.startswith(prefix)]
        assert names
        for name in names:
            key = name[len(prefix):]
            if key in saved:
                torch.testing.assert_close(saved[key], kept[name], rtol=0, atol=0)
    assert set(json.loads((result.output_dir / "evaluation.json").read_text())) == set(result.evaluation)
    assert result.results is result.evaluation and "mlm_accuracy_masked" in result.evaluation


def test_a_fine_tuning_checkpoint_of_before_resumes_its_best():
    """Fine-tuning checkpoints written before the one run hold the best model's state alone, under "best_model"."""
    schedule = EvalSchedule(keep_best="accuracy", patience=2, name="best_model")
    schedule.load_state_dict({"value": 0.75, "step": 12, "bad_evaluations": 1})
    assert (schedule.best.value, schedule.best.step, schedule.best.bad_evaluations) == (0.75, 12, 1)
    assert schedule.history == []


def test_pretrain_from_text_takes_its_text_options_either_way(tmp_path):
    from bertkit.tasks.pretraining import pretrain_from_text
    from bertkit.tasks.text_data import TextOptions

    options = {"vocab_size": 10}
    assert TextOptions(max_seq_length=64).with_options(options, "f") == TextOptions(vocab_size=10, max_seq_length=64)
    assert options == {}
    with pytest.raises(TypeError, match=r"pretrain_from_text\(\) got unexpected keyword argument\(s\) 'vocab_sise'"):
        pretrain_from_text("x.txt", tmp_path / "o", vocab_sise=10)
    assert not (tmp_path / "o").exists()
