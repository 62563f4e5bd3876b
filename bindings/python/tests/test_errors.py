"""Typed errors: each failure is a keel.Error subclass that is also the builtin a Python user
catches (a bad config a ValueError with its JSON path and the suggested key, a missing plugin a
LookupError, a missing file a FileNotFoundError, a bad argument a ValueError or TypeError),
and no message names a C function of the embedding API."""
import pytest

import keel


def test_a_misspelt_key_is_a_config_error_with_its_path_and_suggestion(config):
    config["model"]["n_layr"] = config["model"].pop("n_layer")
    with pytest.raises(ValueError) as raised:
        keel.Trainer(config)
    error = raised.value
    assert isinstance(error, keel.ConfigError) and isinstance(error, keel.Error)
    assert error.path == "model.n_layr"
    assert error.suggestion == "n_layer"
    assert error.status == keel.Status.INVALID_CONFIG


def test_a_wrong_value_names_its_path_and_suggests_nothing(config):
    config["optimizer"]["betas"] = [0.9, 2.0]
    with pytest.raises(keel.ConfigError) as raised:
        keel.Trainer(config)
    assert raised.value.path.startswith("optimizer.betas"), raised.value.path
    assert raised.value.suggestion is None


def test_an_unknown_plugin_is_a_lookup_error(config):
    config["optimizer"] = {"plugin": "lamb_that_does_not_exist"}
    with pytest.raises(LookupError) as raised:
        keel.Trainer(config)
    assert isinstance(raised.value, keel.PluginNotFound)
    assert raised.value.status == keel.Status.NOT_FOUND
    assert "lamb_that_does_not_exist" in str(raised.value)


def test_a_missing_config_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError) as raised:
        keel.Trainer(str(tmp_path / "absent.json"))
    assert isinstance(raised.value, keel.MissingFile) and isinstance(raised.value, keel.Error)
    assert "absent.json" in str(raised.value)
    assert raised.value.errno == 2 and raised.value.status == keel.Status.MISSING_FILE


def test_a_config_file_named_like_a_section_is_not_the_error_path(config, tmp_path):
    import json

    config["train"]["stepz"] = 3
    path = tmp_path / "train.json"
    path.write_text(json.dumps(config))
    with pytest.raises(keel.ConfigError) as raised:
        keel.Trainer(str(path))
    assert raised.value.path == "train.stepz", str(raised.value)
    assert raised.value.suggestion == "steps"
    config["train"].pop("stepz")
    config["trian"] = {}
    with pytest.raises(keel.ConfigError) as raised:
        keel.Trainer(config)
    assert raised.value.path == "trian", str(raised.value)
    assert raised.value.suggestion == "train"


def test_a_file_that_cannot_be_written_is_not_a_missing_file(config, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    config["train"]["metrics_path"] = str(blocker / "metrics.jsonl")  # a folder that is a file
    trainer = keel.Trainer(config)
    with pytest.raises(keel.Error) as raised:
        trainer.train(1)
    assert not isinstance(raised.value, FileNotFoundError), (type(raised.value), str(raised.value))


def test_a_missing_parameter_is_a_lookup_error(config):
    trainer = keel.Trainer(config)
    with pytest.raises(keel.NotFoundError, match="no parameter named 'nope'"):
        trainer.read_param("nope")
    with pytest.raises(LookupError):
        trainer.read_param("nope")


def test_bad_arguments_name_the_python_method_not_the_c_function(config):
    trainer = keel.Trainer(config)
    with pytest.raises(ValueError) as raised:
        trainer.train(-1)
    assert isinstance(raised.value, keel.InvalidArgument)
    assert "Trainer.train" in str(raised.value) and "keel_" not in str(raised.value)
    with pytest.raises(TypeError) as raised:
        trainer.generate(123, 5)
    assert "Trainer.generate: prompt must be a str or a sequence of int token ids, found int" in str(raised.value)
    with pytest.raises(TypeError, match="found an element of type float"):
        trainer.generate([1, 2.5], 5)
    with pytest.raises(ValueError, match="token id -3"):
        trainer.generate([1, -3], 5)
    with pytest.raises(ValueError, match="token id 1180591620717411303424"):
        trainer.generate([1, 2**70], 5)
    with pytest.raises(ValueError, match=r"Trainer.generate: n must be a whole number from 0 to 2\^62, found -1"):
        trainer.generate([1, 2], -1)
    assert len(trainer.generate((1, 2), 3, seed=1)) == 3  # any sequence of ints is a prompt


def test_every_error_type_is_an_error_and_its_builtin():
    pairs = [(keel.ConfigError, ValueError), (keel.InvalidArgument, ValueError), (keel.NotFoundError, LookupError),
             (keel.PluginNotFound, LookupError), (keel.IOFailure, OSError), (keel.MissingFile, FileNotFoundError),
             (keel.Unsupported, NotImplementedError), (keel.OutOfMemory, MemoryError),
             (keel.NonFinite, FloatingPointError)]
    for error_type, builtin in pairs:
        assert issubclass(error_type, keel.Error) and issubclass(error_type, builtin), error_type
    assert issubclass(keel.Error, RuntimeError)


def test_the_class_comes_from_the_status_not_the_words(config, tmp_path, monkeypatch):
    """A missing file is MissingFile however its path is written (a bare name, ./x, a folder
    path), a folder that is there but holds no checkpoint is not; a backend that cannot run here
    is Unsupported, not a missing file (these used to be guessed from the message's words)."""
    monkeypatch.chdir(tmp_path)
    for path in ("run.json", "configs/run.json", "./run.json"):
        with pytest.raises(keel.MissingFile):
            keel.Trainer(path)
    trainer = keel.Trainer(config)
    for resume in ("x", "./x", str(tmp_path / "x")):
        with pytest.raises(keel.MissingFile, match="no such checkpoint folder"):
            trainer.load(resume)
    (tmp_path / "here").mkdir()
    with pytest.raises(keel.NotFoundError, match="no checkpoint here"):
        trainer.load("here")
    cuda = dict(config, backend={"plugin": "cuda"})
    try:
        keel.Trainer(cuda)
    except keel.Error as error:
        assert not isinstance(error, FileNotFoundError), (type(error), str(error))
