"""A Python data source keeps its place through a checkpoint: a resumed run trains on the batches
an uninterrupted one would, so its losses are equal, whether the source is a plain generator
(replayed) or an iterable with state_dict/load_state_dict (restored without replaying). A
tampered position is refused with the reason."""
import json

import numpy as np
import pytest

import keel
from conftest import run_two_ranks, unique_name, with_sgd

VOCAB = 256


def batch_number(index, config):
    """Batch `index` of a stream whose every batch differs: a pure function of the index."""
    rng = np.random.default_rng(1000 + index)
    return rng.integers(0, VOCAB, size=(config["micro_batch"], config["seq_len"] + 1), dtype=np.int64)


def generator_factory(config):
    index = 0
    while True:
        yield batch_number(index, config)
        index += 1


class Stateful:
    """An iterable whose position is one integer and which, as torchdata's StatefulDataLoader,
    reads a loaded state when its next iterator is made. It counts the batches it builds, so a
    test sees that a resume built none to skip."""
    built = 0

    def __init__(self, config):
        self.config, self.index = config, 0

    def __iter__(self):
        return StatefulIterator(self)

    def state_dict(self):
        return {"index": self.index}

    def load_state_dict(self, state):
        self.index = state["index"]


class StatefulIterator:
    def __init__(self, owner):
        self.owner, self.index = owner, owner.index

    def __next__(self):
        Stateful.built += 1
        self.index += 1
        self.owner.index = self.index
        return batch_number(self.index - 1, self.owner.config)


def plugin_config(config, name):
    config = with_sgd(config)
    config["data"] = {"plugin": name, "micro_batch": 4, "global_batch": 4, "seq_len": 64, "val_batches": 2}
    return config


@pytest.mark.parametrize("factory", [generator_factory, Stateful], ids=["replayed", "state_dict"])
def test_resumed_losses_equal_the_uninterrupted_run(config, tmp_path, factory):
    name = unique_name("resumable")
    keel.register_data_source(name, factory)
    cfg = plugin_config(config, name)
    uninterrupted = keel.Trainer(cfg)
    losses = [uninterrupted.step()["loss"] for _ in range(6)]

    first = keel.Trainer(cfg)
    first.train(3)
    first.save(tmp_path / "saved")
    manifest = json.loads(next((tmp_path / "saved").glob("step-*/manifest.json")).read_text())
    assert manifest["data_state"] == {"plugin": name, "resumable": True}
    assert json.loads(manifest["data_positions"][0])["batches"] == 3

    Stateful.built = 0
    resumed = keel.Trainer(cfg)
    resumed.load(tmp_path / "saved")
    resumed_losses = [resumed.step()["loss"] for _ in range(3)]
    assert resumed_losses == losses[3:]
    if factory is Stateful:
        assert Stateful.built == 3  # restored at index 3: nothing was built to be skipped
    # The check can fail: the same checkpoint without the position restarts the source, and the
    # first batches give other losses.
    manifest_path = next((tmp_path / "saved").glob("step-*/manifest.json"))
    manifest = json.loads(manifest_path.read_text())
    del manifest["data_positions"]
    manifest_path.write_text(json.dumps(manifest))
    restarted = keel.Trainer(cfg)
    restarted.load(tmp_path / "saved")
    restarted_losses = [restarted.step()["loss"] for _ in range(3)]
    assert restarted_losses != losses[3:]


def test_a_saved_position_resaved_before_any_batch_is_kept(config, tmp_path):
    name = unique_name("resave")
    keel.register_data_source(name, generator_factory)
    cfg = plugin_config(config, name)
    first = keel.Trainer(cfg)
    first.train(2)
    first.save(tmp_path / "a")
    middle = keel.Trainer(cfg)
    middle.load(tmp_path / "a")
    middle.save(tmp_path / "b")  # no batch drawn since the load: still two batches in
    manifest = json.loads(next((tmp_path / "b").glob("step-*/manifest.json")).read_text())
    assert json.loads(manifest["data_positions"][0]) == {"batches": 2}


@pytest.mark.parametrize("text, reason", [
    ('{"batches": -1}', "batches out of range"),
    ('{"batches": 1e3}', 'no integer "batches"'),
    ('{"batches": 2, "cursor": 1}', "unknown key 'cursor'"),
    ('[2]', "is not an object"),
    ('not json', "is not JSON"),
])
def test_a_tampered_position_is_refused_with_the_reason(config, tmp_path, text, reason):
    name = unique_name("tampered")
    keel.register_data_source(name, generator_factory)
    cfg = plugin_config(config, name)
    first = keel.Trainer(cfg)
    first.train(1)
    first.save(tmp_path / "saved")
    folder = next((tmp_path / "saved").glob("step-*"))
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["data_positions"] = [text]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(keel.Error, match=reason):
        keel.Trainer(cfg).load(tmp_path / "saved")


def test_a_replay_past_the_iterators_end_is_reported(config, tmp_path):
    name = unique_name("short_stream")
    batches = []

    def factory(section):
        batches.append(1)
        # the first run gets an endless stream, the resumed one a stream of two batches
        return generator_factory(section) if len(batches) == 1 else iter([batch_number(i, section) for i in range(2)])

    keel.register_data_source(name, factory)
    cfg = plugin_config(config, name)
    first = keel.Trainer(cfg)
    first.train(3)
    first.save(tmp_path / "saved")
    resumed = keel.Trainer(cfg)
    resumed.load(tmp_path / "saved")
    with pytest.raises(keel.Error, match="train iterator ended after 2 of the 3 batches"):
        resumed.step()


def test_two_ranks_resume_their_own_streams_and_a_tampered_one_fails_both(config, tmp_path):
    """Under mpirun, each rank's source yields its own stream: both resume where they stood
    (losses equal the uninterrupted continuation); a position one rank refuses fails both ranks
    with a message instead of leaving the other waiting in a collective."""
    config = with_sgd(config)
    config["data"] = {"plugin": "rank_stream", "micro_batch": 4, "global_batch": 8, "seq_len": 64, "val_batches": 2}
    config["train"]["checkpoint"]["dir"] = str(tmp_path / "checkpoints")
    saved = run_two_ranks("data_resume_ranks.py", config, "save", tmp_path / "save")
    resumed = run_two_ranks("data_resume_ranks.py", config, "resume", tmp_path / "resume")
    for before, after in zip(saved, resumed):
        assert "error" not in after, after
        assert after["losses"] == before["continued"]
    manifest_path = next((tmp_path / "checkpoints").glob("step-*/manifest.json"))
    manifest = json.loads(manifest_path.read_text())
    assert [json.loads(text)["batches"] for text in manifest["data_positions"]] == [3, 3]
    manifest["data_positions"][1] = '{"batches": -5}'
    manifest_path.write_text(json.dumps(manifest))
    tampered = run_two_ranks("data_resume_ranks.py", config, "resume", tmp_path / "tampered")
    assert "data_positions[0]" not in tampered[0]["error"]
    assert "another rank's data source refused its saved position" in tampered[0]["error"]
    assert "data_positions[1]" in tampered[1]["error"] and "batches out of range" in tampered[1]["error"]
