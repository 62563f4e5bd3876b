"""An optimizer written in NumPy, called by the core through the plugin API: plain SGD gives
the built-in "sgd" plugin's parameters; its exceptions come back as themselves."""
import numpy as np
import pytest

import keel
from conftest import unique_name, with_sgd


class NumpySgd:
    """p -= lr * grad * grad_scale, in place on Keel's own memory."""
    n_state_slots = 0

    def __init__(self, config):
        self.lr = config["lr"]
        self.calls = 0

    def step(self, params, grads, states, lr, grad_scale, step, apply_weight_decay):
        assert states == [] and not grads.flags.writeable and step >= 1
        self.calls += 1
        params -= np.float32(lr) * (grads * np.float32(grad_scale))


def test_numpy_sgd_matches_the_builtin_sgd(config):
    made = []
    name = unique_name("numpy_sgd")
    keel.register_optimizer(name, lambda section: made.append(NumpySgd(section)) or made[-1])
    builtin = keel.Trainer(with_sgd(config, lr=0.05))
    python = keel.Trainer(with_sgd(config, lr=0.05) | {"optimizer": {"plugin": name, "lr": 0.05}})
    for _ in range(3):
        expected, found = builtin.step(), python.step()
        assert found["loss"] == pytest.approx(expected["loss"], abs=1e-5)
    assert made[0].calls >= 3
    for param in builtin.param_shapes():
        np.testing.assert_allclose(python.read_param(param), builtin.read_param(param), rtol=0, atol=1e-6,
                                   err_msg=param)


class Momentum:
    """Heavy-ball momentum, recording how much velocity each call finds in its state slot."""
    n_state_slots = 1
    lr = 0.05

    def __init__(self):
        self.found = {}  # step -> sum |velocity| found at each call, before updating it

    def step(self, params, grads, states, lr, grad_scale, step, apply_weight_decay):
        (velocity,) = states
        self.found.setdefault(step, []).append(float(np.abs(velocity).sum()))
        velocity *= 0.9
        velocity += grads * grad_scale
        params -= lr * velocity


def test_state_slots_start_at_zero_and_persist(config):
    made = []
    name = unique_name("momentum")
    keel.register_optimizer(name, lambda section: made.append(Momentum()) or made[-1])
    config["optimizer"] = {"plugin": name}
    trainer = keel.Trainer(config)
    trainer.train(3)
    found = made[0].found
    assert sorted(found) == [1, 2, 3]
    assert all(total == 0 for total in found[1])
    assert all(total > 0 for total in found[2] + found[3])


def test_exception_in_step_is_raised_as_itself_with_the_plugin_named(config):
    class Broken(NumpySgd):
        def step(self, *args):
            raise ArithmeticError("the optimizer fell over")

    name = unique_name("broken")
    keel.register_optimizer(name, lambda section: Broken(section))
    config["optimizer"] = {"plugin": name, "lr": 0.1}
    trainer = keel.Trainer(config)
    with pytest.raises(ArithmeticError, match="the optimizer fell over") as raised:
        trainer.step()
    assert any(f"optimizer {name}" in note for note in raised.value.__notes__)


def test_factory_errors_surface_when_the_trainer_is_built(config):
    name = unique_name("picky")

    def factory(section):
        raise ValueError(f"unknown key {sorted(section)}")

    keel.register_optimizer(name, factory)
    config["optimizer"] = {"plugin": name, "lr": 0.1}
    with pytest.raises(ValueError, match=r"unknown key \['lr', 'plugin'\]"):
        keel.Trainer(config)

    incomplete = unique_name("incomplete")
    keel.register_optimizer(incomplete, lambda section: object())
    config["optimizer"] = {"plugin": incomplete}
    with pytest.raises(keel.Error, match="no attribute 'n_state_slots'"):
        keel.Trainer(config)


def test_duplicate_name_is_refused():
    name = unique_name("twice")
    keel.register_optimizer(name, NumpySgd)
    with pytest.raises(keel.Error, match=name):
        keel.register_optimizer(name, NumpySgd)
    with pytest.raises(keel.Error, match="sgd"):
        keel.register_optimizer("sgd", NumpySgd)  # the built-in plugin's name
