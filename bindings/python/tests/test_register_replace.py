"""A name a built-in plugin has is refused, naming the library, unless replace=True; one's own
Python plugin is re-registered (a notebook cell run twice) with replace=True, and trainers made
afterwards use the new factory."""
import json
import subprocess
import sys

import pytest

import keel
from conftest import unique_name


class Sgd:
    n_state_slots = 0

    def __init__(self, section, scale=1.0):
        self.lr = section.get("lr", 0.1)
        self.scale = scale

    def step(self, params, grads, states, lr, grad_scale, step, apply_weight_decay):
        params -= self.scale * lr * grad_scale * grads


def test_a_builtin_name_is_refused_naming_the_library():
    with pytest.raises(keel.Error, match=r"optimizer 'adamw'.*libkeel-adamw\.so.*replace=True"):
        keel.register_optimizer("adamw", Sgd)
    adamw = [p for p in keel.plugins() if p["kind"] == "optimizer" and p["name"] == "adamw"]
    assert len(adamw) == 1 and adamw[0]["path"].endswith("libkeel-adamw.so")  # the built-in stays


def test_a_builtin_data_source_name_is_refused_too():
    # No data plugin ships as a library, so the check is against one of ours registered first.
    name = unique_name("data_twice")
    keel.register_data_source(name, lambda section: iter(()))
    with pytest.raises(keel.Error, match=f"data source '{name}'.*replace=True"):
        keel.register_data_source(name, lambda section: iter(()))


def test_replace_true_re_registers_ones_own_plugin(config):
    name = unique_name("cell")
    made = []
    keel.register_optimizer(name, lambda section: made.append("first") or Sgd(section))
    keel.register_optimizer(name, lambda section: made.append("second") or Sgd(section), replace=True)
    config["optimizer"] = {"plugin": name, "lr": 0.05}
    keel.Trainer(config).step()
    assert made == ["second"]
    assert [p["name"] for p in keel.plugins()].count(name) == 1


# In a process of its own: the built-in "sgd" stays shadowed for the rest of the process.
SHADOW_SGD = """
import json, sys
import keel
made = []
class Sgd:
    n_state_slots = 0
    def __init__(self, section):
        self.lr = section["lr"]
    def step(self, params, grads, states, lr, grad_scale, step, apply_weight_decay):
        params -= lr * grad_scale * grads
keel.register_optimizer("sgd", lambda section: made.append(section) or Sgd(section), replace=True,
                        description="sgd written in Python")
config = json.loads(sys.argv[1])
config["optimizer"] = {"plugin": "sgd", "lr": 0.05}
keel.Trainer(config).step()
sgd = [p for p in keel.plugins() if p["kind"] == "optimizer" and p["name"] == "sgd"]
print(json.dumps({"made": len(made), "sgd": sgd}))
"""


def test_replace_true_shadows_a_builtin_for_later_trainers(config):
    done = subprocess.run([sys.executable, "-c", SHADOW_SGD, json.dumps(config)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["made"] == 1
    assert len(result["sgd"]) == 1
    assert result["sgd"][0]["path"] == "" and result["sgd"][0]["description"] == "sgd written in Python"
