"""callbacks.json as untrusted input, beyond test_callbacks' damaged files: what Python's own JSON
reader and number conversions raise (nesting past its recursion limit, an integer past a float, a
missing key) and files that are not regular files all become keel.Error naming the file, never a
bare RecursionError or OverflowError, and never a silent fresh start."""
import json
import os

import pytest

import keel

KEY = "EarlyStopping{'monitor': 'loss', 'mode': 'min'}"


def saved_checkpoint(config, tmp_path):
    cfg = dict(config, train=dict(config["train"], steps=2, checkpoint={"dir": str(tmp_path / "ck"), "every": 2}))
    keel.Trainer(cfg, callbacks=[keel.EarlyStopping(monitor="loss")]).train()
    return cfg, tmp_path / "ck" / "step-00000002" / "callbacks.json"


def state(**changes):
    early = {"best": 1.0, "wait": 0, "stopped_step": None}
    early.update(changes)
    return json.dumps({"format": "keel.callbacks/1", "callbacks": {KEY: {k: v for k, v in early.items() if v != "gone"}}})


def refused(cfg, tmp_path, state_file, why):
    with pytest.raises(keel.Error, match=why) as error:
        keel.Trainer(cfg, resume=tmp_path / "ck", callbacks=[keel.EarlyStopping(monitor="loss")])
    assert str(state_file) in str(error.value)


def test_python_json_failures_become_keel_errors(config, tmp_path):
    cfg, state_file = saved_checkpoint(config, tmp_path)
    for text, why in (("[" * 400_000 + "]" * 400_000, "nested too deep"),  # within the 1 MiB limit
                      (state(best=10 ** 400), "int too large to convert to float"),
                      (state(best="gone"), "missing key 'best'")):
        state_file.write_text(text)
        refused(cfg, tmp_path, state_file, why)


def test_a_state_file_that_is_not_a_regular_file_is_refused(config, tmp_path):
    cfg, state_file = saved_checkpoint(config, tmp_path)
    for make in (os.mkfifo, os.mkdir, lambda path: os.symlink("/dev/zero", path)):
        if state_file.is_dir() and not state_file.is_symlink():
            state_file.rmdir()
        elif os.path.lexists(state_file):
            state_file.unlink()
        make(state_file)
        refused(cfg, tmp_path, state_file, "not a regular file")
