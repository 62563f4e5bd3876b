"""A model's own step metrics (model.h step_metrics, ABI 0.19) in the metrics dict a step hands
Python: the llama model with experts reports its balancing loss and expert loads under "model",
the same numbers the run's metrics file holds; a model without them adds no "model" key."""
import json

import keel


def moe_config(config):
    config = dict(config)
    config["model"] = {"plugin": "llama", "n_layer": 2, "d_model": 48, "n_head": 6, "n_kv_head": 2,
                       "vocab_size": 256, "seq_len": 64, "ffn_hidden": 40, "n_experts": 4,
                       "n_experts_per_token": 2}
    config["train"] = dict(config["train"], steps=2, log_every=1)
    return config


def test_moe_step_metrics_reach_python_as_the_file_has_them(config, tmp_path):
    seen = []
    keel.Trainer(moe_config(config)).train(callback=seen.append)
    logged = {r["step"]: r for r in map(json.loads, open(tmp_path / "metrics.jsonl"))}
    assert [m["step"] for m in seen] == [1, 2]
    for m in seen:
        model = m["model"]
        assert set(model) == {"aux_loss", "expert_load.max_over_mean", "expert_load.layer0", "expert_load.layer1"}
        assert model == logged[m["step"]]["model"]
        assert model["expert_load.max_over_mean"] == max(model["expert_load.layer0"], model["expert_load.layer1"])


def test_a_model_without_step_metrics_adds_no_model_key(config):
    trainer = keel.Trainer(dict(config, train=dict(config["train"], steps=1)))
    seen = []
    trainer.train(callback=seen.append)
    assert "model" not in seen[0]
