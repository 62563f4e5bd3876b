"""The communication-efficient strategies from Python, picked by name like any plugin: listed by
keel.plugins() with the library that holds them; each trains and checkpoints through a Trainer
(one rank here: the compressing ones send nothing to compress, diloco and edit step locally and
sync with themselves), and a config mistake names its JSON path. Their multi-rank behaviour is
tested under mpirun in tests/e2e/comm_efficient_checks.py."""
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
    assert (tmp_path / "saved" / "manifest.json").is_file()


def test_a_bad_key_names_its_path(config):
    config["parallel"] = {"strategy": {"plugin": "topk", "ratio": 2.0}}
    with pytest.raises(keel.Error, match=r"parallel\.strategy\.ratio: expected the share of each bucket sent, in \(0, 1\]"):
        keel.Trainer(config)
