"""A data source written in Python: its batches train the model (the same tokens give the same
losses as the built-in shard reader), a wrong array raises keel.Error, and an exception comes out as itself."""
import numpy as np
import pytest

import keel
from conftest import unique_name, with_sgd

VOCAB = 256


def fixed_window(seq_len, seed=7):
    return np.random.default_rng(seed).integers(0, VOCAB, size=seq_len + 1, dtype=np.int64)


def repeating(window):
    """A factory yielding the same window in every row of every batch, forever."""
    def factory(config):
        assert config["split"] in ("train", "validation")
        batch = np.tile(window, (config["micro_batch"], 1))
        while True:
            yield batch
    return factory


def write_shard(path, tokens):
    """One llm.c token shard: 256 int32 header (magic, version, count), then uint16 tokens."""
    header = np.zeros(256, dtype="<i4")
    header[:3] = 20240520, 1, len(tokens)
    with open(path, "wb") as out:
        out.write(header.tobytes())
        out.write(np.asarray(tokens, dtype="<u2").tobytes())


def plugin_config(config, name, **keys):
    config["data"] = {"plugin": name, "micro_batch": 4, "global_batch": 4, "seq_len": 64, "val_batches": 2, **keys}
    return config


def test_a_repeated_batch_is_learned(config):
    name = unique_name("repeat")
    keel.register_data_source(name, repeating(fixed_window(64)))
    trainer = keel.Trainer(plugin_config(config, name))
    losses = [trainer.step()["loss"] for _ in range(8)]
    assert losses[-1] < losses[0] - 0.5, losses
    assert trainer.evaluate() < losses[0]


def test_same_tokens_same_losses_as_the_builtin_shard_reader(config, tmp_path):
    window = fixed_window(64, seed=11)
    write_shard(tmp_path / "one.bin", window)  # one window of T+1 tokens: every sample is it
    builtin_config = with_sgd(config)
    builtin_config["data"] = {"source": "shards", "train": str(tmp_path / "one.bin"), "val": str(tmp_path / "one.bin"),
                              "micro_batch": 4, "global_batch": 4, "seq_len": 64, "val_batches": 2}
    name = unique_name("same_tokens")
    keel.register_data_source(name, repeating(window))
    builtin = keel.Trainer(builtin_config)
    python = keel.Trainer(plugin_config(with_sgd(config), name))
    for _ in range(3):
        assert python.step()["loss"] == builtin.step()["loss"]
    assert python.evaluate() == builtin.evaluate()


def test_config_keys_reach_the_factory(config):
    seen = []
    name = unique_name("keys")

    def factory(section):
        seen.append(dict(section))
        return repeating(fixed_window(64))(section)

    keel.register_data_source(name, factory)
    trainer = keel.Trainer(plugin_config(config, name, corpus="tiny", weight=0.5))
    trainer.step()
    trainer.evaluate()
    trainer.evaluate()
    assert seen[0] == {"plugin": name, "corpus": "tiny", "weight": 0.5, "split": "train", "micro_batch": 4,
                       "seq_len": 64}
    assert [s["split"] for s in seen] == ["train", "validation", "validation"]  # restarted per evaluation


def test_wrong_shape_names_the_plugin_and_both_shapes(config):
    name = unique_name("short_rows")
    keel.register_data_source(name, lambda section: iter([np.zeros((4, 64), dtype=np.int32)] * 10))
    trainer = keel.Trainer(plugin_config(config, name))
    with pytest.raises(keel.Error, match=r"data source short_rows_\d+.*\(4, 65\).*found int32 array of shape \(4, 64\)"):
        trainer.step()


def test_floats_and_negative_ids_are_refused(config):
    name = unique_name("floats")
    keel.register_data_source(name, lambda section: iter([np.zeros((4, 65))] * 10))
    with pytest.raises(keel.Error, match="found float64 array"):
        keel.Trainer(plugin_config(config, name)).step()
    name = unique_name("negative")
    keel.register_data_source(name, lambda section: iter([np.full((4, 65), -1)] * 10))
    with pytest.raises(keel.Error, match=r"\[0, 2\^31\)"):
        keel.Trainer(plugin_config(config, name)).step()


def test_exception_in_the_iterator_is_raised_as_itself_with_the_plugin_named(config):
    def factory(section):
        yield np.zeros((4, 65), dtype=np.int32)
        raise OSError("disk on fire")

    name = unique_name("failing")
    keel.register_data_source(name, factory)
    trainer = keel.Trainer(plugin_config(config, name))
    trainer.step()
    with pytest.raises(OSError, match="disk on fire") as raised:
        trainer.step()
    assert any(f"data source {name}: OSError: disk on fire" in note for note in raised.value.__notes__)


def test_an_ended_iterator_is_reported(config):
    name = unique_name("finite")
    keel.register_data_source(name, lambda section: iter([np.zeros((4, 65), dtype=np.uint16)] * 2))
    trainer = keel.Trainer(plugin_config(config, name))
    trainer.train(2)
    with pytest.raises(keel.Error, match="train iterator ended after 2 batches"):
        trainer.step()
