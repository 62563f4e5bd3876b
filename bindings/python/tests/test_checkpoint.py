"""save/load through the binding: a loaded checkpoint restores the parameters exactly and
training continues with exactly the losses of an uninterrupted run."""
import numpy as np

import keel


def test_save_load_round_trip_and_exact_resume(config, tmp_path):
    uninterrupted = keel.Trainer(config)
    losses = [uninterrupted.step()["loss"] for _ in range(6)]

    first = keel.Trainer(config)
    first.train(3)
    first.save(tmp_path / "saved", keep=2)
    saved = {name: first.read_param(name) for name in first.param_shapes()}
    assert (tmp_path / "saved" / "latest").exists()

    resumed = keel.Trainer(config)
    assert resumed.global_step == 0
    resumed.load(tmp_path / "saved")
    assert resumed.global_step == 3  # the checkpoint's step, before any step of this trainer
    assert resumed.last_metrics()["step"] == 3
    for name, values in saved.items():
        np.testing.assert_array_equal(resumed.read_param(name), values, err_msg=name)
    assert [resumed.step()["loss"] for _ in range(3)] == losses[3:]
    assert resumed.global_step == 6


def test_load_of_a_missing_checkpoint_raises(config, tmp_path):
    trainer = keel.Trainer(config)
    try:
        trainer.load(tmp_path / "nothing-here")
    except FileNotFoundError as error:
        assert isinstance(error, keel.MissingFile), type(error)
        assert "nothing-here" in str(error)
    else:
        raise AssertionError("load of a missing folder did not raise FileNotFoundError")
    (tmp_path / "empty").mkdir()
    try:
        trainer.load(tmp_path / "empty")  # there, but holds no checkpoint: not a missing file
    except keel.Error as error:
        assert not isinstance(error, FileNotFoundError), type(error)
        assert "no checkpoint here" in str(error)
    else:
        raise AssertionError("load of an empty folder did not raise")


def test_a_resumed_run_logs_each_step_once(config, tmp_path):
    import json

    config["train"]["log_every"] = 1
    first = keel.Trainer(config)
    first.train(3)
    first.save(tmp_path / "saved")
    first.train(2)  # steps 4 and 5 are logged, then the run "stops" before another save
    del first
    resumed = keel.Trainer(config)
    resumed.load(tmp_path / "saved")
    resumed.train(3)  # steps 4, 5 and 6 again, from the checkpoint
    with open(config["train"]["metrics_path"]) as f:
        steps = [json.loads(line)["step"] for line in f]
    assert steps == [1, 2, 3, 4, 5, 6], steps


def test_loading_into_a_trainer_that_has_trained_logs_each_step_once(config, tmp_path):
    import json

    config["train"]["log_every"] = 1
    trainer = keel.Trainer(config)
    trainer.train(3)
    trainer.save(tmp_path / "saved")
    trainer.train(2)
    trainer.load(tmp_path / "saved")  # back to step 3 in the same trainer
    assert trainer.global_step == 3
    trainer.train(3)
    with open(config["train"]["metrics_path"]) as f:
        steps = [json.loads(line)["step"] for line in f]
    assert steps == [1, 2, 3, 4, 5, 6], steps
