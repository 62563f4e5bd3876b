# Type stubs of the keel package (the compiled keel._keel re-exported by keel/__init__.py).
import enum
import os
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Protocol, Union, overload

import numpy as np
import numpy.typing as npt

__version__: str
ABI_VERSION: str  # "major.minor" of the C ABI this build was compiled against

Config = Union[Mapping[str, Any], str, os.PathLike[str]]
# step, loss, lr, grad_norm, tokens_per_s, mfu, step_ms, tokens, time_ms (a dict of the phases);
# val_loss on steps that evaluated, checkpoint (a folder) on steps that saved.
Metrics = dict[str, Any]
# Your own batch for Trainer.step / forward_backward: an array-like (batch, seq_len + 1), a pair
# (tokens, targets), a mapping {"tokens", "targets"}, or Hugging Face's {"input_ids", "labels"}.
Batch = Union[npt.ArrayLike, tuple[npt.ArrayLike, npt.ArrayLike], Mapping[str, npt.ArrayLike]]

class Status(enum.IntEnum):
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

class Error(RuntimeError):
    """A Keel call failed; str(error) is the core's message, status the keel_status code."""
    status: int

class ConfigError(Error, ValueError):
    path: Optional[str]  # the JSON path the message names ("model.n_layr")
    suggestion: Optional[str]  # the key a "did you mean" proposes

class InvalidArgument(Error, ValueError): ...
class NotFoundError(Error, LookupError): ...
class PluginNotFound(NotFoundError): ...
class IOFailure(Error, OSError): ...
class MissingFile(IOFailure, FileNotFoundError): ...
class Unsupported(Error, NotImplementedError): ...
class OutOfMemory(Error, MemoryError): ...
class NonFinite(Error, FloatingPointError): ...

class Tensor:
    """A live parameter of a Trainer, shared (not copied) through DLPack or __array__."""
    @property
    def name(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def device(self) -> tuple[int, int]: ...  # (DLPack device type, device id); CPU is (1, 0)
    @property
    def data_ptr(self) -> int: ...
    def __dlpack__(self, **kwargs: Any) -> Any: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...
    def __array__(self, dtype: Optional[npt.DTypeLike] = None, copy: Optional[bool] = None) -> np.ndarray: ...

# The core's tokenizer (prepare-data's): "bytes", a tokenizer.json, or a Hugging Face folder.
class Tokenizer:
    def __init__(self, spec: Union[str, os.PathLike[str]]) -> None: ...
    path: str
    eos_token: Optional[str]
    bos_token: Optional[str]
    eos_token_id: Optional[int]
    bos_token_id: Optional[int]
    @property
    def vocab_size(self) -> int: ...
    def encode(self, text: Union[str, bytes]) -> list[int]: ...
    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str: ...
    def token_to_id(self, token: str) -> Optional[int]: ...
    def id_to_token(self, id: int) -> Optional[str]: ...
    def is_special(self, id: int) -> bool: ...

class Trainer:
    # config: a mapping (NumPy/PyTorch scalars become plain numbers), JSON text (a str whose first
    # non-space character is '{'), or the path of a JSON file. resume: "latest" (the newest
    # checkpoint of train.checkpoint.dir) or a checkpoint folder. A dict naming no output path
    # writes to runs/run/version_N, a new N each run (resume="latest": the highest N).
    # verbose False: train() prints nothing on stdout (metrics file and events as ever).
    # tokenizer: what generate's str prompts go through by default (a keel.Tokenizer or its spec).
    def __init__(self, config: Config, resume: Optional[Union[str, os.PathLike[str]]] = None,
                 callbacks: Iterable["Callback"] = (), verbose: bool = True,
                 tokenizer: Optional[Union["Tokenizer", str, os.PathLike[str]]] = None) -> None: ...
    tokenizer: Optional["Tokenizer"]
    verbose: bool
    callbacks: list["Callback"]
    should_stop: bool  # set by a hook: training stops after the step it runs in
    # batch None: the configured data's next batch. Else your own: (batch, seq_len + 1) ids split
    # into tokens and targets, a (tokens, targets) pair or {"tokens", "targets"} dict, or Hugging
    # Face's {"input_ids", "labels"} (unshifted, seq_len + 1); NumPy, torch, __dlpack__ or lists.
    def step(self, batch: Optional[Batch] = None) -> Metrics: ...
    # step(batch) in two halves: the loss and gradients (grad(name) reads one), then the update.
    def forward_backward(self, batch: Batch) -> float: ...
    def grad(self, name: str) -> npt.NDArray[np.float32]: ...
    def optimizer_step(self) -> Metrics: ...
    # Hugging Face: export_hf writes model.safetensors + config.json (what from_pretrained loads);
    # load_hf takes a folder, a .safetensors file or a state dict (names and layouts undone).
    def export_hf(self, folder: Union[str, os.PathLike[str]],
                  tokenizer: Optional[Union[str, os.PathLike[str]]] = None) -> None: ...
    def load_hf(self, source: Union[str, os.PathLike[str], Mapping[str, Any]]) -> None: ...
    # Frees the trainer now; later calls raise keel.InvalidArgument. parameters() arrays and
    # Tensors stay valid (the memory goes with the last). `with keel.Trainer(...) as t:` closes.
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> "Trainer": ...
    def __exit__(self, *exc_info: Any) -> bool: ...
    # As `keel run` per step (progress, metrics file, TensorBoard, eval_every, checkpoint.every);
    # the learning-rate horizon is train.steps, not `steps`.
    # steps None: up to train.steps.
    def train(self, steps: Optional[int] = None, callback: Optional[Callable[[Metrics], Any]] = None) -> None: ...
    # Under mpirun every rank must call logits and generate with the same arguments.
    def logits(self, tokens: npt.ArrayLike) -> npt.NDArray[np.float32]: ...  # (B, T) -> (B, T, vocab)
    @property
    def vocab_size(self) -> int: ...
    @overload
    def generate(self, prompt: str, n: int, temperature: Optional[float] = None, seed: Optional[int] = None,
                 top_k: int = 0, top_p: float = 1.0, use_cache: bool = True,
                 eos_token_id: Union[int, list[int], None] = None, stop: Union[str, list[str], None] = None,
                 tokenizer: Optional[Union["Tokenizer", str, os.PathLike[str]]] = None) -> str: ...
    @overload
    def generate(self, prompt: list[int], n: int, temperature: Optional[float] = None,
                 seed: Optional[int] = None, top_k: int = 0, top_p: float = 1.0,
                 use_cache: bool = True, eos_token_id: Union[int, list[int], None] = None,
                 stop: Union[str, list[str], None] = None,
                 tokenizer: Optional[Union["Tokenizer", str, os.PathLike[str]]] = None) -> list[int]: ...
    @overload
    def generate(self, prompt: list[str], n: int, temperature: Optional[float] = None,
                 seed: Optional[int] = None, top_k: int = 0, top_p: float = 1.0,
                 use_cache: bool = True, eos_token_id: Union[int, list[int], None] = None,
                 stop: Union[str, list[str], None] = None,
                 tokenizer: Optional[Union["Tokenizer", str, os.PathLike[str]]] = None) -> list[str]: ...
    @overload
    def generate(self, prompt: list[list[int]], n: int, temperature: Optional[float] = None,
                 seed: Optional[int] = None, top_k: int = 0, top_p: float = 1.0,
                 use_cache: bool = True, eos_token_id: Union[int, list[int], None] = None,
                 stop: Union[str, list[str], None] = None,
                 tokenizer: Optional[Union["Tokenizer", str, os.PathLike[str]]] = None) -> list[list[int]]: ...
    def evaluate(self) -> float: ...
    def last_metrics(self) -> Metrics: ...
    @property
    def global_step(self) -> int: ...  # steps done; the checkpoint's right after load()
    # No root_dir: train.checkpoint.dir, keeping train.checkpoint.keep (keep must then be None).
    def save(self, root_dir: Optional[Union[str, os.PathLike[str]]] = None, keep: Optional[int] = None) -> None: ...
    def load(self, checkpoint: Union[str, os.PathLike[str]]) -> None: ...
    def param_shapes(self) -> dict[str, tuple[int, ...]]: ...
    # Views of the trainer's memory: valid until the next step, train or load.
    def parameters(self) -> dict[str, npt.NDArray[np.float32]]: ...
    def tensor(self, name: str) -> Tensor: ...
    def read_param(self, name: str, *, gather: bool = False) -> npt.NDArray[np.float32]: ...
    def write_param(self, name: str, values: npt.ArrayLike) -> None: ...

# Each: kind, name, version, abi, path ("" for Python plugins), description.
def plugins() -> list[dict[str, str]]: ...
# A run's metrics.jsonl (loss, val_loss against step) drawn with matplotlib into out_path (PNG,
# or the format its extension names); returns the matplotlib Figure. ImportError naming
# `pip install matplotlib` when matplotlib is missing; ValueError for a file that is not metrics.
def plot_metrics(metrics_path: Union[str, os.PathLike[str]], out_path: Union[str, os.PathLike[str]],
                 title: Optional[str] = None) -> Any: ...
def register_plugin_library(path: Union[str, os.PathLike[str]]) -> None: ...
# The least severe log line printed on stderr from now on, process-wide: "debug", "info", "warn", "error".
def set_log_level(level: str) -> None: ...

# factory(config) -> iterable of integer arrays (micro_batch, seq_len + 1); config holds the data
# section's own keys plus "split", "micro_batch" and "seq_len".
def register_data_source(
    name: str,
    factory: Callable[[dict[str, Any]], Iterable[npt.ArrayLike]],
    version: str = "0.1.0",
    description: str = "a data source written in Python",
    replace: bool = False,  # a name already taken is keel.Error unless replace=True
) -> None: ...

class PythonOptimizer(Protocol):
    n_state_slots: int
    lr: float
    def step(
        self,
        params: npt.NDArray[np.float32],
        grads: npt.NDArray[np.float32],
        states: list[npt.NDArray[np.float32]],
        lr: float,
        grad_scale: float,
        step: int,
        apply_weight_decay: bool,
        # only when per_tensor or whole_tensors is True: the tensor piece the call updates
        tensor: Optional[TensorPiece] = None,
    ) -> None: ...

class TensorPiece:
    name: str
    shape: tuple[int, ...]
    piece_shape: tuple[int, ...]
    piece_offset: tuple[int, ...]
    offset: int
    size: int
    @property
    def whole(self) -> bool: ...

def register_optimizer(
    name: str,
    factory: Callable[[dict[str, Any]], PythonOptimizer],
    version: str = "0.1.0",
    description: str = "an optimizer written in Python",
    replace: bool = False,  # a name already taken (e.g. "adamw") is keel.Error unless replace=True
) -> None: ...

class Callback:
    def on_train_start(self, trainer: Trainer) -> None: ...
    def on_step_end(self, trainer: Trainer, metrics: Metrics) -> None: ...
    def on_eval(self, trainer: Trainer, metrics: Metrics) -> None: ...
    def on_save(self, trainer: Trainer, path: str) -> None: ...
    def on_train_end(self, trainer: Trainer) -> None: ...
    def on_exception(self, trainer: Trainer, error: BaseException) -> None: ...
    @property
    def state_key(self) -> str: ...
    def state_dict(self) -> Dict[str, Any]: ...
    def load_state_dict(self, state: Dict[str, Any]) -> None: ...

class EarlyStopping(Callback):
    def __init__(self, monitor: str = "val_loss", patience: int = 3, min_delta: float = 0.0, mode: str = "min") -> None: ...
    best: float
    wait: int
    stopped_step: Optional[int]

class ModelCheckpoint(Callback):
    def __init__(self, dirpath: Union[str, os.PathLike[str]], monitor: str = "val_loss", mode: str = "min",
                 min_delta: float = 0.0, keep: int = 1) -> None: ...
    best: float
    best_path: Optional[str]
