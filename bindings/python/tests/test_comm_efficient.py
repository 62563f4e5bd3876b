"""The communication-efficient strategies from Python, picked by name like any plugin: listed by
keel.plugins() with the library that holds them; each trains and checkpoints through a Trainer
(one rank here: the compressing ones send nothing to compress, diloco and edit step locally and
sync with themselves), and a config mistake names its JSON path. Their multi-rank behaviour is
tested under mpirun in tests/e2e/comm_efficient_checks.py. The memory-efficient optimizers
(adamw8bit, adafactor) likewise: listed, trained by name, and resumed from a checkpoint exactly."""
import pathlib

import pytest

import keel

STRATEGIES = {  # name -> (library, a section)
    "topk": ("libkeel-ddp.so", {"plugin": "topk", "ratio": 0.1}),
    "powersgd": ("libkeel-ddp.so", {"plugin": "powersgd", "rank": 2}),
    "diloco": ("libkeel-diloco.so", {"plugin": "diloco", "sync_every": 2}),
    "edit": ("libkeel-diloco.so", {"plugin": "edit", "sync_every": 2, "clip_norm": 1.0}),
}


def test_listed_by_name_with_their_library():
    found = {p["name"]: p for p in keel.plugins() if p["kind"] == "strategy"}
    for name, (library, _) in STRATEGIES.items():
        assert pathlib.Path(found[name]["path"]).name == library, found[name]
        assert found[name]["abi"] == keel.ABI_VERSION


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_trains_and_saves_by_name(config, tmp_path, name):
    config["parallel"] = {"strategy": STRATEGIES[name][1]}
    trainer = keel.Trainer(config)
    first = trainer.step()["loss"]
    for _ in range(3):
        last = trainer.step()["loss"]
    assert last < first, (first, last)
    trainer.save(tmp_path / "saved")
    assert (tmp_path / "saved" / "latest").exists()


def test_a_edit_by_name_steps_a_whole_interval(config):
    """A-EDiT (edit with sync_seconds): one step() is one sync interval, here 3 simulated seconds
    of 1 s steps, so 3 steps of this one replica; its loss is the mean of edit's (sync_every 3)
    three step losses on the same seed, and the parameters agree."""
    edit = {"plugin": "edit", "sync_every": 3}
    config["parallel"] = {"strategy": edit}
    lockstep = keel.Trainer(config)
    losses = [lockstep.step()["loss"] for _ in range(3)]
    config["parallel"] = {"strategy": {"plugin": "edit", "sync_seconds": 3, "simulated_step_seconds": [1]}}
    trainer = keel.Trainer(config)
    interval = trainer.step()
    data = config["data"]
    assert interval["step"] == 3 and trainer.global_step == 3, interval
    assert interval["tokens"] == 3 * data["global_batch"] * data["seq_len"], interval
    assert interval["loss"] == pytest.approx(sum(losses) / 3, rel=1e-12), (interval, losses)
    for name in trainer.param_shapes():
        assert (trainer.read_param(name) == lockstep.read_param(name)).all(), name


def test_a_bad_key_names_its_path(config):
    config["parallel"] = {"strategy": {"plugin": "topk", "ratio": 2.0}}
    with pytest.raises(keel.Error, match=r"parallel\.strategy\.ratio: expected the share of each bucket sent, in \(0, 1\]"):
        keel.Trainer(config)


OPTIMIZERS = {  # name -> a section (both live in libkeel-compact_optimizers.so)
    "adamw8bit": {"plugin": "adamw8bit", "lr": 3e-3},
    "adafactor": {"plugin": "adafactor", "lr": 3e-3, "scale_parameter": False, "beta1": 0.9},
}


def test_optimizers_listed_by_name_with_their_library():
    found = {p["name"]: p for p in keel.plugins() if p["kind"] == "optimizer"}
    for name in OPTIMIZERS:
        assert pathlib.Path(found[name]["path"]).name == "libkeel-compact_optimizers.so", found[name]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_trains_and_resumes_exactly_by_name(config, tmp_path, name):
    config["optimizer"] = OPTIMIZERS[name]
    trainer = keel.Trainer(config)
    first = trainer.step()["loss"]
    for _ in range(3):
        last = trainer.step()["loss"]
    assert last < first, (first, last)
    trainer.save(tmp_path / "saved")
    expected = [trainer.step()["loss"] for _ in range(2)]
    resumed = keel.Trainer(config)
    resumed.load(tmp_path / "saved")
    assert [resumed.step()["loss"] for _ in range(2)] == expected
