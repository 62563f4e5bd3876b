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
    resumed.load(tmp_path / "saved")
    for name, values in saved.items():
        np.testing.assert_array_equal(resumed.read_param(name), values, err_msg=name)
    assert [resumed.step()["loss"] for _ in range(3)] == losses[3:]


def test_load_of_a_missing_checkpoint_raises(config, tmp_path):
    trainer = keel.Trainer(config)
    try:
        trainer.load(tmp_path / "nothing-here")
    except keel.Error as error:
        assert "nothing-here" in str(error)
    else:
        raise AssertionError("load of a missing folder did not raise")
