"""An exception raised in a Python data source or optimizer comes out of the Keel call as
itself: its type, its text, its traceback (through the plugin's own frames), with the core's
message as a note; KeyboardInterrupt stays KeyboardInterrupt."""
import traceback

import numpy as np
import pytest

import keel
from conftest import unique_name


def data_config(config, name):
    config["data"] = {"plugin": name, "micro_batch": 4, "global_batch": 4, "seq_len": 64, "val_batches": 2}
    return config


def raising_source(exception):
    def batches_then_fail(section):
        yield np.zeros((4, 65), dtype=np.int32)
        raise exception
    return batches_then_fail


def test_value_error_in_a_data_source_is_raised_as_value_error(config):
    name = unique_name("value_error")
    keel.register_data_source(name, raising_source(ValueError("x")))
    trainer = keel.Trainer(data_config(config, name))
    trainer.step()
    with pytest.raises(ValueError, match="^x$") as raised:
        trainer.step()
    frames = [frame.name for frame in traceback.extract_tb(raised.value.__traceback__)]
    assert "batches_then_fail" in frames, frames  # the traceback reaches into the plugin
    assert any(f"data source {name}" in note for note in getattr(raised.value, "__notes__", [])), raised.value


def test_keyboard_interrupt_in_a_data_source_propagates(config):
    name = unique_name("interrupted")
    keel.register_data_source(name, raising_source(KeyboardInterrupt()))
    trainer = keel.Trainer(data_config(config, name))
    trainer.step()
    with pytest.raises(KeyboardInterrupt):
        trainer.train(5)


def test_an_optimizer_exception_keeps_its_type(config):
    class Broken:
        n_state_slots = 0
        lr = 0.1

        def step(self, *args):
            raise ZeroDivisionError("the optimizer divided by zero")

    name = unique_name("zero_division")
    keel.register_optimizer(name, lambda section: Broken())
    config["optimizer"] = {"plugin": name, "lr": 0.1}
    trainer = keel.Trainer(config)
    with pytest.raises(ZeroDivisionError, match="divided by zero"):
        trainer.step()
    # The trainer's next failure that is not Python's is keel.Error again, not a stale exception.
    with pytest.raises(keel.Error, match="no parameter named"):
        trainer.read_param("no.such.param")
