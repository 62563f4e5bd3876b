"""Keel, a C++ trainer for GPT-style language models, from Python.

The package is the compiled extension keel._keel (the embedding API of abi/keel/embed.h) plus
the core library and plugins installed beside it, which the core finds on its own:

    import keel
    trainer = keel.Trainer({"model": {"plugin": "gpt", ...}, ...})   # or JSON text, or a file path
    trainer.train(100, callback=lambda m: print(m["step"], m["loss"]))  # as `keel run` does
    weights = trainer.parameters()   # name -> NumPy array sharing the trainer's memory
    logits = trainer.logits(tokens)  # (B, T) -> (B, T, vocab)
    text = trainer.generate("def ", 100, seed=1)

Python plugins: keel.register_data_source(name, factory) and keel.register_optimizer(name,
factory) make a name usable as "data": {"plugin": name} or "optimizer": {"plugin": name}; a
name already taken needs replace=True. An exception a plugin raises comes out of the Keel call
that ran it as itself, traceback included. `pip install` also gives the `keel` command.

Errors: every failed call raises a keel.Error (a RuntimeError) subclass that is also the builtin
a Python user would catch: keel.ConfigError (ValueError; .path, .suggestion), keel.InvalidArgument
(ValueError), keel.NotFoundError and keel.PluginNotFound (LookupError), keel.MissingFile
(FileNotFoundError), keel.IOFailure (OSError), keel.Unsupported (NotImplementedError),
keel.OutOfMemory (MemoryError), keel.NonFinite (FloatingPointError); .status is a keel.Status
code. A wrong type of argument is a TypeError.

Hooks: keel.Trainer(config, callbacks=[keel.EarlyStopping("val_loss", patience=3),
keel.ModelCheckpoint("best")]) runs keel.Callback hooks around train() (keel/callbacks.py).

keel.plot_metrics("runs/x/metrics.jsonl", "loss.png") draws a run's loss and val_loss with
matplotlib, when it is installed (keel/plot.py); `keel plot ... --out loss.svg` needs nothing.
"""
import enum

from keel._keel import (
    ABI_VERSION,
    ConfigError,
    Error,
    InvalidArgument,
    IOFailure,
    MissingFile,
    NonFinite,
    NotFoundError,
    OutOfMemory,
    PluginNotFound,
    Unsupported,
    Tensor,
    plugins,
    register_data_source,
    register_optimizer,
    register_plugin_library,
)
from keel._keel import Trainer as _ExtensionTrainer
from keel.callbacks import Callback, EarlyStopping, ModelCheckpoint, run_with_callbacks
from keel.plot import plot_metrics


class Trainer(_ExtensionTrainer):
    __doc__ = _ExtensionTrainer.__doc__ + (
        "\ncallbacks: keel.Callback instances (keel/callbacks.py) whose hooks run around train();\n"
        "a hook sets trainer.should_stop = True to stop after the step it runs in.")

    def __init__(self, config, resume=None, callbacks=()):
        super().__init__(config, resume)
        self.callbacks = list(callbacks)
        self.should_stop = False

    def train(self, steps=None, callback=None):
        return run_with_callbacks(self, super().train, steps, callback, self.callbacks)

    train.__doc__ = _ExtensionTrainer.train.__doc__


class Status(enum.IntEnum):
    """The keel_status codes of abi/keel/types.h, as keel.Error.status holds them."""

    OK = 0
    INVALID_ARGUMENT = 1
    INVALID_CONFIG = 2
    OUT_OF_MEMORY = 3
    UNIMPLEMENTED = 4
    IO = 5
    ABI_MISMATCH = 6
    NOT_FOUND = 7
    INTERNAL = 8
    NONFINITE = 9


__version__ = "0.1.0"
__all__ = [
    "ABI_VERSION",
    "Callback",
    "EarlyStopping",
    "ModelCheckpoint",
    "ConfigError",
    "Error",
    "InvalidArgument",
    "IOFailure",
    "MissingFile",
    "NonFinite",
    "NotFoundError",
    "OutOfMemory",
    "PluginNotFound",
    "Status",
    "Unsupported",
    "Tensor",
    "Trainer",
    "plot_metrics",
    "plugins",
    "register_data_source",
    "register_optimizer",
    "register_plugin_library",
]
