"""Trainer from a dict or a file: steps lower the loss, train() calls back and stops on a
truthy return, evaluate() gives a finite loss, a bad config names its JSON path."""
import json
import math

import pytest

import keel

METRIC_KEYS = {"step", "loss", "lr", "grad_norm", "tokens_per_s", "mfu", "step_ms", "tokens", "time_ms"}


def test_five_steps_lower_the_loss(config):
    trainer = keel.Trainer(config)
    losses = []
    for expected_step in range(1, 6):
        metrics = trainer.step()
        assert set(metrics) == METRIC_KEYS
        assert metrics["step"] == expected_step
        assert metrics["tokens_per_s"] > 0 and metrics["step_ms"] > 0 and metrics["lr"] > 0
        losses.append(metrics["loss"])
    assert losses[0] == pytest.approx(math.log(256), abs=0.3)  # byte-level: starts near uniform
    assert losses[-1] < losses[0] - 0.2, losses
    assert trainer.last_metrics() == metrics


def test_train_calls_back_after_each_step_and_stops_when_asked(config):
    trainer = keel.Trainer(config)
    seen = []
    trainer.train(10, callback=lambda m: seen.append(m["step"]) or m["step"] == 3)
    assert seen == [1, 2, 3]
    trainer.train(2)
    assert trainer.last_metrics()["step"] == 5


def test_exception_in_progress_callback_stops_training_and_is_raised(config):
    trainer = keel.Trainer(config)

    def callback(metrics):
        if metrics["step"] == 2:
            raise ValueError("stop at two")

    with pytest.raises(ValueError, match="stop at two"):
        trainer.train(5, callback)
    assert trainer.last_metrics()["step"] == 2


def test_evaluate_gives_a_finite_validation_loss(config):
    trainer = keel.Trainer(config)
    trainer.train(2)
    val_loss = trainer.evaluate()
    assert isinstance(val_loss, float) and 0 < val_loss < 10
    assert trainer.evaluate() == val_loss  # the same validation batches every time


def test_config_file_path(config, tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(config))
    assert keel.Trainer(path).step()["step"] == 1
    assert keel.Trainer(str(path)).step()["step"] == 1


def test_bad_config_names_the_json_path(config):
    config["optimizer"]["betas"] = [0.9, 1.5]
    with pytest.raises(keel.Error, match=r"optimizer\.betas"):
        keel.Trainer(config)
    config["optimizer"]["betas"] = [0.9, 0.95]
    config["model"]["n_layr"] = 2
    with pytest.raises(keel.Error, match=r"model\.n_layr.*did you mean \"n_layer\"") as raised:
        keel.Trainer(config)
    assert isinstance(raised.value, RuntimeError)
    assert raised.value.status == 2  # KEEL_ERR_INVALID_CONFIG


def test_missing_config_file_raises(tmp_path):
    with pytest.raises(keel.Error, match="cannot open the config file"):
        keel.Trainer(tmp_path / "missing.json")


def test_config_must_be_a_dict_or_a_path():
    with pytest.raises(TypeError):
        keel.Trainer(42)
