"""Keel, a C++ trainer for GPT-style language models, from Python.

The package is the compiled extension keel._keel (the embedding API of abi/keel/embed.h) plus
the core library and plugins installed beside it, which the core finds on its own:

    import keel
    trainer = keel.Trainer({"model": {"plugin": "gpt", ...}, ...})   # or JSON text, or a file path
    trainer.train(100, callback=lambda m: print(m["step"], m["loss"]))  # as `keel run` does
    weights = trainer.parameters()   # name -> NumPy array sharing the trainer's memory
    logits = trainer.logits(tokens)  # (B, T) -> (B, T, vocab)
    text = trainer.generate("def ", 100, seed=1)
    tok = keel.Tokenizer("tokenizer.json")  # ids as prepare-data's; generate(..., tokenizer=tok)

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
import collections.abc
import enum
import math
import operator
import os


def _offer_packaged_openblas():
    """Points the cpu backend at scipy-openblas32's OpenBLAS (a dependency of the wheel), which it
    loads when the system has no libopenblas.so.0; a value already set is kept."""
    if os.environ.get("KEEL_OPENBLAS_LIBRARY"):
        return
    try:
        import scipy_openblas32
    except ImportError:
        return
    os.environ["KEEL_OPENBLAS_LIBRARY"] = os.path.join(scipy_openblas32.get_lib_dir(),
                                                       scipy_openblas32.get_library(fullname=True))


_offer_packaged_openblas()

from keel._keel import (  # noqa: E402 (after the OpenBLAS fallback is set for the cpu backend)
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
    set_log_level,
)
from keel import _callback_state, _config, _world_end
from keel._tokenizer import Tokenizer
from keel._keel import Trainer as _ExtensionTrainer
from keel.callbacks import Callback, EarlyStopping, ModelCheckpoint, run_with_callbacks
from keel.optim import TensorPiece
from keel.plot import plot_metrics


_BYTES = []


def _byte_tokenizer():
    """keel.Tokenizer("bytes"), made once: a byte-level model's str prompts go through it."""
    if not _BYTES:
        _BYTES.append(Tokenizer("bytes"))
    return _BYTES[0]


def _is_prompt_batch(prompt):
    """A list or tuple of prompts (each a str or a sequence of ids), not one prompt of ids."""
    if isinstance(prompt, (str, bytes)) or not isinstance(prompt, (list, tuple)) or not prompt:
        return False
    return all(isinstance(p, str) or (hasattr(p, "__len__") and not hasattr(p, "__index__")) for p in prompt)


def _check_generation_args(n, temperature, seed, top_k, top_p, eos_ids, vocab_size):
    """generate's arguments of a wrong type, or past what the extension's C types hold, refused by
    name before the extension sees them (pybind's own refusal prints its whole signature instead);
    the ranges within those types (temperature >= 0, top_p in (0, 1], top_k >= 0) are the core's
    to check, with its own message. eos ids are this wrapper's alone."""
    def whole(value):  # an int or anything that is one (numpy's integers), not a bool
        return not isinstance(value, bool) and hasattr(type(value), "__index__")

    def refuse(what, expected, found):
        raise InvalidArgument(f"Trainer.generate: {what} must be {expected}, found {found!r}")

    if not whole(n):
        refuse("n", "a whole number from 0 to 2^62", n)
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
                                    or not math.isfinite(temperature)):
        refuse("temperature", "None or a finite number", temperature)
    if seed is not None and (not whole(seed) or not 0 <= operator.index(seed) < 1 << 64):
        refuse("seed", "None or a whole number from 0 to 2^64 - 1", seed)
    if not whole(top_k) or not -(1 << 31) <= operator.index(top_k) < 1 << 31:
        refuse("top_k", "a whole number from 0 (all tokens) to 2^31 - 1", top_k)
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)):
        refuse("top_p", "a number in (0, 1]", top_p)
    for eos in eos_ids:
        if not whole(eos) or not 0 <= operator.index(eos) < vocab_size:
            refuse("eos_token_id", f"an id (or a list of ids) of the model's vocabulary, 0 to {vocab_size - 1}", eos)


class Trainer(_ExtensionTrainer):
    __doc__ = _ExtensionTrainer.__doc__ + (
        "\ncallbacks: keel.Callback instances (keel/callbacks.py) whose hooks run around train();\n"
        "a hook sets trainer.should_stop = True to stop after the step it runs in.")

    def __init__(self, config, resume=None, callbacks=(), verbose=True, tokenizer=None):
        _world_end.install_when_launched()  # an uncaught exception on one rank ends every rank
        # Opened first, so a bad tokenizer is refused before a trainer is built.
        tokenizer = tokenizer if tokenizer is None or isinstance(tokenizer, Tokenizer) else Tokenizer(tokenizer)
        try:
            if isinstance(config, collections.abc.Mapping):
                config = _config.with_run_folder(config, resume)  # the core then keeps its folders as named
            super().__init__(config, resume)
        except BaseException:
            _config.release_claimed_folder()
            raise
        _config.keep_claimed_folder()
        self.callbacks = list(callbacks)
        self.tokenizer = tokenizer
        self.should_stop = False
        self.verbose = verbose
        self._checkpoint_root = _config.checkpoint_root(config)
        self._checkpoints_without_callback_state = []  # (folder, its callbacks.json text; None: not taken yet)
        self._in_hooks = False
        if resume is not None:
            self._restore_callback_state(resume)

    def _restore_callback_state(self, checkpoint):
        folder = _callback_state.loaded_folder(checkpoint, self._checkpoint_root, self.global_step)
        if folder is not None:
            _callback_state.restore(folder, self.callbacks)

    def _write_callback_state(self):
        """Writes the callbacks' state beside each checkpoint saved since the last call. The state
        is taken at the first call after the save (once its step's hooks have all run) and kept, so
        a checkpoint that an asynchronous save has not published yet gets it at a later call."""
        pending = []
        for folder, text in self._checkpoints_without_callback_state:
            text = _callback_state.snapshot(self.callbacks) if text is None else text
            if not _callback_state.write(folder, text):
                pending.append((folder, text))
        self._checkpoints_without_callback_state = pending

    def save(self, root_dir=None, keep=None):
        super().save(root_dir, keep)
        root = self._checkpoint_root if root_dir is None else os.fspath(root_dir)
        if root is not None:
            self._checkpoints_without_callback_state.append((os.path.join(root, f"step-{self.global_step:08d}"), None))
        if not self._in_hooks:
            self._write_callback_state()

    save.__doc__ = _ExtensionTrainer.save.__doc__ + (
        "\nThe callbacks' state_dict() goes beside it (callbacks.json), as after a step that saves.")

    def load(self, checkpoint):
        super().load(checkpoint)
        self._restore_callback_state(checkpoint)

    load.__doc__ = _ExtensionTrainer.load.__doc__ + "\nThe callbacks' saved state is restored with it."

    @property
    def verbose(self):
        """Whether train() prints the run's header, progress and notes on stdout as `keel run` does
        (True, the default); False prints nothing there (the metrics file and TensorBoard events are
        written either way; warnings still reach stderr, and keel.set_log_level("warn") quiets the
        info lines of start-up)."""
        return self._verbose

    @verbose.setter
    def verbose(self, value):
        self._set_verbose(bool(value))
        self._verbose = bool(value)

    def train(self, steps=None, callback=None):
        return run_with_callbacks(self, super().train, steps, callback, self.callbacks)

    train.__doc__ = _ExtensionTrainer.train.__doc__

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False

    def step(self, batch=None):
        """One optimizer step; returns its metrics (step, loss, lr, grad_norm, tokens_per_s, mfu,
        step_ms, tokens, time_ms). batch None: the next batch of the configured data. Otherwise
        your own (this rank's share under mpirun; every rank calls): an integer array (batch,
        seq_len + 1) whose rows are split into tokens [:, :-1] and targets [:, 1:]; a pair
        (tokens, targets) or a dict {"tokens", "targets"}, each (batch, seq_len); or Hugging
        Face's {"input_ids", "labels"} (both (batch, seq_len + 1), labels unshifted, as a
        transformers model takes them). Packed rows (several documents each) add their positions,
        restarting at 0 at each document: a third array (tokens, targets, positions), a dict's
        "positions", or Hugging Face's "position_ids" (as DataCollatorWithFlattening makes them);
        attention then stays inside each document, and a target across documents must be -1. seq_len is data.seq_len, batch at most data.micro_batch or
        a multiple of it. NumPy arrays, torch tensors, anything with __dlpack__, or nested lists."""
        if batch is None:
            return super().step()
        return self._step_on(*_as_batch(batch))

    def generate(self, prompt, n, temperature=None, seed=None, top_k=0, top_p=1.0, use_cache=True,
                 eos_token_id=None, stop=None, tokenizer=None):
        """Generates up to n tokens after prompt, as `keel run` samples. prompt a list of token ids
        gives the list of generated ids; a str prompt gives the generated text: it is encoded and
        the new tokens decoded by `tokenizer` (a keel.Tokenizer, or what keel.Tokenizer takes: the
        tokenizer.json the data was prepared with), else the Trainer's own (Trainer(...,
        tokenizer=...)), else, for a byte-level model (vocab 256), bytes (UTF-8; invalid sequences
        become U+FFFD). A list of prompts (of str, or of id lists) gives a list of results, one
        prompt after another.
        temperature None: the config's train.sample_temperature. seed None: a fresh random seed; the
        same seed gives the same tokens. top_k (0: all) keeps the k most likely tokens, top_p (1:
        all) the smallest set of them whose probability reaches p, renormalised before sampling.
        eos_token_id (an id or a list of ids; None: the tokenizer's end of text, if a str prompt
        goes through one that has it; [] none) and stop (a str or a list of str, through the
        tokenizer) end generation after the token that completes one; it is kept in the result,
        as transformers does. Ctrl-C stops after the token in progress and raises
        KeyboardInterrupt; n may be any count, nothing is sized by it. use_cache (default True)
        runs each new token alone over the model's key/value cache; False reruns the whole window
        every token. Under mpirun every rank must call it with the same arguments, seed included."""
        if _is_prompt_batch(prompt):
            return [self.generate(one, n, temperature, seed, top_k, top_p, use_cache, eos_token_id, stop, tokenizer)
                    for one in prompt]
        text = isinstance(prompt, str)
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if any(not isinstance(s, str) or not s for s in stops):
            raise InvalidArgument(f"Trainer.generate: stop must be a non-empty str or a list of them, found {stop!r}")
        tok = self._generation_tokenizer(tokenizer) if (text or stops) else None
        if eos_token_id is None and text and tok is not None:
            eos_token_id = tok.eos_token_id
        eos_ids = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id or [])
        _check_generation_args(n, temperature, seed, top_k, top_p, eos_ids, self.vocab_size)
        eos = set(eos_ids)
        generated = []

        def on_token(token, _index):
            generated.append(token)
            if token in eos:
                return True
            # The whole continuation decoded again: a stop may end inside a token, or its last
            # character may need the next token's bytes.
            return bool(stops) and any(s in tok.decode(generated) for s in stops)

        ids = tok.encode(prompt) if text else prompt
        generated_ids = self._generate_each(ids, n, temperature, seed, top_k, top_p, use_cache,
                                            on_token if (eos or stops) else None)
        return tok.decode(generated_ids) if text else generated_ids

    def _generation_tokenizer(self, tokenizer):
        """The tokenizer a str prompt or a stop string goes through, checked against the model."""
        if tokenizer is not None and not isinstance(tokenizer, Tokenizer):
            tokenizer = Tokenizer(tokenizer)
        tokenizer = tokenizer or self.tokenizer
        if tokenizer is None:
            if self.vocab_size != 256:
                raise InvalidArgument(
                    f"Trainer.generate: a str prompt or stop string needs a tokenizer for this model (vocab "
                    f"{self.vocab_size}): pass tokenizer= (the tokenizer.json the data was prepared with, or a "
                    f"keel.Tokenizer) here or to keel.Trainer, or pass a list of token ids")
            tokenizer = _byte_tokenizer()
        if tokenizer.vocab_size > self.vocab_size:
            raise InvalidArgument(f"Trainer.generate: the tokenizer {tokenizer.path} has {tokenizer.vocab_size} "
                                  f"tokens, more than the model's vocabulary ({self.vocab_size}): not the tokenizer "
                                  f"the data was prepared with")
        return tokenizer

    def export_hf(self, folder, tokenizer=None):
        """Writes folder/model.safetensors, config.json and generation_config.json as `keel export`
        does: what transformers' from_pretrained and generate load (bos/eos ids null where the model
        names none, as a byte-level one). tokenizer: the tokenizer.json the data was prepared with,
        or a Hugging Face folder holding one, or a keel.Tokenizer (None: the Trainer's own,
        Trainer(..., tokenizer=...), if it has one); it is copied beside the weights (with its
        tokenizer_config.json and special_tokens_map.json) and its end- and start-of-text ids become
        bos/eos/pad. Every rank calls it (rank 0 writes)."""
        tokenizer = self.tokenizer if tokenizer is None else tokenizer
        if isinstance(tokenizer, Tokenizer):
            tokenizer = None if tokenizer.spec == "bytes" else tokenizer.spec  # bytes: no files to copy
        super().export_hf(folder, None if tokenizer is None else os.fspath(tokenizer))

    def load_hf(self, source):
        """Sets the model's weights from Hugging Face's: a folder (model.safetensors or its shards and
        index), a .safetensors file, or a state dict of name -> array (torch tensors too, as
        model.state_dict() gives them). Names, Conv1D transposes and the padded vocabulary are
        undone as model.init_from does; a missing, extra or misshapen tensor raises naming it and
        changes nothing. Every rank calls it."""
        import collections.abc
        import os
        import tempfile

        if not isinstance(source, collections.abc.Mapping):
            return self._load_hf(os.fspath(source))
        with tempfile.TemporaryDirectory(prefix="keel-load-hf-") as folder:
            path = os.path.join(folder, "model.safetensors")
            _write_safetensors(path, source)
            return self._load_hf(path)

    def forward_backward(self, batch):
        """The first half of step(batch): the gradients of `batch` (as step takes it) from zero, and
        the loss the step will report. Read them with grad(name), then apply them with
        optimizer_step(); another forward_backward or step replaces them."""
        return self._forward_backward(*_as_batch(batch))


def _write_safetensors(path, tensors):
    """A state dict as one safetensors file of F32 tensors (the format: an 8-byte little-endian
    header length, the JSON header of dtype, shape and byte offsets, then the bytes)."""
    import json
    import struct

    import numpy as np

    header, blobs, offset = {}, [], 0
    for name, value in tensors.items():
        if hasattr(value, "detach"):
            value = value.detach().cpu().float().numpy()
        array = np.ascontiguousarray(np.asarray(value, dtype=np.float32))
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + array.nbytes]}
        blobs.append(array.tobytes())
        offset += array.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text)
        for blob in blobs:
            out.write(blob)


def _as_ids(value, targets=False):
    """Token ids as a NumPy array: DLPack (torch, JAX, CuPy on the host) without a copy where it can.
    `targets`: -1 and Hugging Face's -100 mark positions not learned, both given to Keel as -1."""
    import numpy as np

    if hasattr(value, "__dlpack__") and not isinstance(value, np.ndarray):
        try:
            return np.from_dlpack(value)
        except (AttributeError, TypeError, RuntimeError, BufferError):
            pass  # NumPy before 1.22, a tensor on a GPU, a dtype NumPy's DLPack does not take: copy below
        if hasattr(value, "cpu"):
            value = value.cpu()
    ids = np.asarray(value)
    if targets and ids.dtype.kind == "i" and ids.size and ids.min() < 0:
        ignored = (ids == -1) | (ids == -100)
        ids = np.where(ignored, -1, ids).astype(ids.dtype)
        if (ids[~ignored] < 0).any() or ids.max() > 2**31 - 1:
            raise InvalidArgument(f"targets must lie in [0, 2^31), or be -1 or -100 where nothing is learned; found "
                                  f"{ids[~ignored].min()}")
        return ids
    if ids.dtype.kind in "iu" and ids.size and (ids.min() < 0 or ids.max() > 2**31 - 1):
        raise InvalidArgument(f"token ids must lie in [0, 2^31); found {ids.min()} .. {ids.max()}")
    return ids


def _as_batch(batch):
    """(tokens, targets, positions or None) from the forms Trainer.step(batch) takes."""
    import collections.abc

    import numpy as np

    if isinstance(batch, collections.abc.Mapping):
        if "tokens" in batch and "targets" in batch:
            positions = _as_ids(batch["positions"]) if batch.get("positions") is not None else None
            return _as_ids(batch["tokens"]), _as_ids(batch["targets"], targets=True), positions
        if "input_ids" in batch:
            # Hugging Face's convention: labels line up with input_ids and the model shifts them,
            # so position t learns labels[t + 1]; without labels, the ids themselves.
            ids = _as_ids(batch["input_ids"])
            # Labels of -100 (PyTorch's ignore_index, Hugging Face's masked prompt) are not learned.
            labels = _as_ids(batch["labels"], targets=True) if "labels" in batch else ids
            if ids.ndim != 2 or labels.shape != ids.shape or ids.shape[1] < 2:
                raise InvalidArgument(f"input_ids and labels must both be (batch, seq_len + 1); found {ids.shape} and "
                                 f"{labels.shape}")
            # Packed rows (DataCollatorWithFlattening's): position_ids restart at each document.
            positions = None
            if batch.get("position_ids") is not None:
                positions = _as_ids(batch["position_ids"])
                if positions.shape != ids.shape:
                    raise InvalidArgument(f"position_ids must be (batch, seq_len + 1) like input_ids; found "
                                          f"{positions.shape} and {ids.shape}")
                positions = positions[:, :-1]
            return ids[:, :-1], labels[:, 1:], positions
        raise InvalidArgument(f"a batch dict needs 'tokens' and 'targets', or 'input_ids' (and 'labels', Hugging "
                              f"Face's unshifted ones); packed rows add 'positions' or 'position_ids'; it has "
                              f"{sorted(batch)}")
    if isinstance(batch, (tuple, list)) and len(batch) in (2, 3) and np.ndim(batch[0]) == 2:
        positions = _as_ids(batch[2]) if len(batch) == 3 and batch[2] is not None else None
        return _as_ids(batch[0]), _as_ids(batch[1], targets=True), positions
    rows = _as_ids(batch)
    if rows.ndim != 2 or rows.shape[1] < 2:
        raise InvalidArgument(f"a batch array must be (batch, seq_len + 1) token ids, split into tokens and the targets one "
                         f"position on; found shape {tuple(rows.shape)}")
    return rows[:, :-1], rows[:, 1:], None


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
    MISSING_FILE = 10


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
    "TensorPiece",
    "Tokenizer",
    "Trainer",
    "plot_metrics",
    "plugins",
    "register_data_source",
    "register_optimizer",
    "register_plugin_library",
    "set_log_level",
]
