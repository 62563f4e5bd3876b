"""Trainer.train(n) does what `keel run` does per step: the metrics JSONL gets the logged steps,
val_loss at every train.eval_every, a checkpoint folder at every train.checkpoint.every, one
metrics file across calls; and the learning-rate horizon is train.steps, whatever n is."""
import json
import math

import pytest

import keel


def records(path):
    return {r["step"]: r for r in map(json.loads, path.read_text().splitlines())}


def test_train_writes_metrics_evaluates_and_checkpoints(config, tmp_path, capfd):
    config["train"].update({"steps": 50, "log_every": 50, "eval_every": 3,
                            "checkpoint": {"dir": str(tmp_path / "ckpt"), "every": 4}})
    trainer = keel.Trainer(config)
    trainer.train(5)
    trainer.train(3)  # a second call continues the same metrics file
    logged = records(tmp_path / "metrics.jsonl")
    assert {1, 3, 6} <= set(logged), sorted(logged)
    assert "val_loss" in logged[3] and "val_loss" in logged[6]
    assert math.isfinite(logged[6]["val_loss"])
    assert "val_loss" not in logged[1]
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("step-*")) == ["step-00000004", "step-00000008"]
    out = capfd.readouterr().out
    assert "step 3/5" in out and "val_loss" in out, out  # progress as keel run prints it


def test_the_learning_rate_horizon_is_train_steps_not_n(config):
    config["lr_schedule"] = {"warmup_steps": 0, "decay": "linear", "min_lr_ratio": 0.0}
    config["optimizer"]["lr"] = 1e-3
    config["train"]["steps"] = 10
    chunked, whole = keel.Trainer(config), keel.Trainer(config)
    seen = []
    for _ in range(4):
        chunked.train(3, callback=lambda m: seen.append(m["lr"]))  # 12 steps: past train.steps
    whole_lrs = []
    whole.train(10, callback=lambda m: whole_lrs.append(m["lr"]))
    assert seen[:10] == whole_lrs  # chunks follow the one schedule of train.steps = 10
    assert whole_lrs[0] == pytest.approx(1e-3) and whole_lrs[5] == pytest.approx(5e-4)
    assert seen[10:] == [0.0, 0.0]  # past the horizon: the schedule's final value
