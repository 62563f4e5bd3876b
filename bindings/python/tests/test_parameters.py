"""Parameters without copies: parameters() arrays, keel.Tensor's DLPack and __array__, and
torch.from_dlpack all alias the trainer's own memory; read_param/write_param copy."""
import gc
import sys

import numpy as np
import pytest

import keel


def first_matrix_name(trainer):
    return next(name for name, shape in trainer.param_shapes().items() if len(shape) == 2)


def test_param_shapes_match_the_arrays(config):
    trainer = keel.Trainer(config)
    shapes = trainer.param_shapes()
    arrays = trainer.parameters()
    assert list(arrays) == list(shapes)
    total = 0
    for name, array in arrays.items():
        assert array.dtype == np.float32 and array.shape == shapes[name], name
        assert array.flags.c_contiguous and array.flags.writeable
        total += array.size
    assert 700_000 < total < 900_000  # the 0.8M-parameter quick-start model


def test_parameters_share_memory_with_the_trainer(config):
    trainer = keel.Trainer(config)
    name = first_matrix_name(trainer)
    array = trainer.parameters()[name]
    array[0, :3] = [1.5, -2.0, 0.25]
    np.testing.assert_array_equal(trainer.read_param(name)[0, :3], [1.5, -2.0, 0.25])
    before = array.copy()
    trainer.step()  # the resident strategy updates the same memory in place
    assert not np.array_equal(array, before)
    np.testing.assert_array_equal(trainer.read_param(name), array)


def test_write_param_is_seen_by_the_arrays(config):
    trainer = keel.Trainer(config)
    name = first_matrix_name(trainer)
    array = trainer.parameters()[name]
    values = np.arange(array.size, dtype=np.float64).reshape(array.shape) * 1e-3
    trainer.write_param(name, values)
    np.testing.assert_array_equal(array, values.astype(np.float32))
    copy = trainer.read_param(name)
    assert not np.shares_memory(copy, array)
    with pytest.raises(keel.Error, match=r"expected shape"):
        trainer.write_param(name, values.ravel())
    with pytest.raises(keel.Error, match="no parameter named 'nope'"):
        trainer.read_param("nope")


def test_arrays_keep_the_trainer_alive(config):
    trainer = keel.Trainer(config)
    name = first_matrix_name(trainer)
    array = trainer.parameters()[name]
    expected = trainer.read_param(name)
    del trainer
    gc.collect()
    np.testing.assert_array_equal(array, expected)  # still the live buffer, not freed memory


def test_tensor_dlpack_aliases_the_parameter_array(config):
    trainer = keel.Trainer(config)
    name = first_matrix_name(trainer)
    tensor = trainer.tensor(name)
    assert tensor.shape == trainer.param_shapes()[name]
    assert tensor.dtype == "float32" and tensor.device == (1, 0)
    assert tensor.__dlpack_device__() == (1, 0)
    array = trainer.parameters()[name]
    assert tensor.data_ptr == array.ctypes.data
    via_array = np.asarray(tensor)
    assert np.shares_memory(via_array, array)
    via_dlpack = np.from_dlpack(tensor)
    assert via_dlpack.ctypes.data == array.ctypes.data and via_dlpack.shape == array.shape
    with pytest.raises(keel.Error, match="nope"):
        trainer.tensor("nope")


def test_torch_from_dlpack_shares_memory(config):
    torch = pytest.importorskip("torch")
    trainer = keel.Trainer(config)
    name = first_matrix_name(trainer)
    weights = torch.from_dlpack(trainer.tensor(name))
    assert weights.dtype == torch.float32 and tuple(weights.shape) == trainer.param_shapes()[name]
    array = trainer.parameters()[name]
    assert weights.data_ptr() == array.ctypes.data
    weights[0, 0] = 42.0
    assert trainer.read_param(name)[0, 0] == 42.0
    del trainer, array
    gc.collect()
    assert float(weights[0, 0]) == 42.0  # the capsule's reference keeps the trainer alive


def test_an_unconsumed_capsule_releases_its_reference(config):
    trainer = keel.Trainer(config)
    tensor = trainer.tensor(first_matrix_name(trainer))
    references = sys.getrefcount(tensor)
    capsule = tensor.__dlpack__()
    assert sys.getrefcount(tensor) == references + 1
    del capsule
    assert sys.getrefcount(tensor) == references
