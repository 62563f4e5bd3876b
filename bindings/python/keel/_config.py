"""Turning a Python config into the JSON text the core reads: dicts and lists as they are,
NumPy and PyTorch scalars (anything with .tolist() or .item(), such as np.int64(4),
np.float32(1e-3) or a 0-d tensor) as the plain numbers they hold; anything else is refused
with keel.Error naming the config path where it was found."""
import json
import os
import re
import threading
from collections.abc import Mapping

from keel._keel import Error

_PLAIN = (str, int, float, bool, type(None))


def _plain(value, path):
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise Error(f"config {path or '(top level)'}: key {key!r} is a {type(key).__name__}; "
                            "expected a str")
            out[key] = _plain(item, f"{path}.{key}" if path else key)
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(item, f"{path}[{i}]") for i, item in enumerate(value)]
    for method in ("tolist", "item"):  # NumPy scalars and arrays, PyTorch tensors
        convert = getattr(value, method, None)
        if callable(convert):
            try:
                converted = convert()
            except Exception as error:  # a tensor of several elements has no .item()
                raise Error(f"config {path}: cannot convert {type(value).__name__} ({error})") from error
            if converted is not value:
                return _plain(converted, path)
    raise Error(f"config {path or '(top level)'}: a {type(value).__module__}.{type(value).__name__} "
                f"({value!r}) is not JSON; expected a dict, list, str, number, bool or None")


def to_json_text(config):
    """The JSON text of `config` (a mapping), with NumPy and PyTorch scalars as plain numbers."""
    plain = _plain(config, "")
    return json.dumps(plain, allow_nan=True)


_OUTPUT_KEYS = ("metrics_path", "tensorboard_dir")

# The version folder with_run_folder claimed for the trainer being built on this thread, so a
# trainer that fails to build gives it back (release_claimed_folder) instead of leaving it empty.
_claims = threading.local()


def _has_checkpoint(folder):
    checkpoints = os.path.join(folder, "checkpoints")
    return os.path.isdir(checkpoints) and any(name == "latest" or name.startswith("step-")
                                              for name in os.listdir(checkpoints))


def keep_claimed_folder():
    """The trainer was built: the folder it claimed is its own, never given back by a later failure."""
    _claims.folder = None


def release_claimed_folder():
    """Removes the version folder claimed for a trainer that failed to build, if still empty."""
    folder = getattr(_claims, "folder", None)
    _claims.folder = None
    if folder:
        try:
            os.rmdir(folder)
        except OSError:  # something was written there after all: keep it
            pass


def with_run_folder(config, resume):
    """A dict config that names none of train.metrics_path, train.tensorboard_dir and
    train.checkpoint.dir writes to runs/run/version_N, N one past the highest version there, so a
    second run never truncates the first one's metrics or overwrites its checkpoints (as
    Lightning's version folders). With resume="latest" it continues the highest version that
    holds a checkpoint instead.
    Configs that name any of them, and file configs, keep their paths as `keel run` would."""
    train = config.get("train", {}) if isinstance(config.get("train", {}), Mapping) else {}
    checkpoint = train.get("checkpoint", {}) if isinstance(train.get("checkpoint", {}), Mapping) else {}
    if any(key in train for key in _OUTPUT_KEYS) or "dir" in checkpoint:
        return config
    root = os.path.join("runs", "run")
    versions = [int(m.group(1)) for m in (re.fullmatch(r"version_(\d+)", name)
                                          for name in (os.listdir(root) if os.path.isdir(root) else [])) if m]
    _claims.folder = None
    if resume == "latest":
        # The newest run that saved something: a later one that failed before its first save
        # (or another process's just claimed) holds nothing to continue.
        saved = [v for v in versions if _has_checkpoint(os.path.join(root, f"version_{v}"))]
        folder = os.path.join(root, f"version_{max(saved or versions, default=0)}")
    else:
        # Claimed here, not at the first train(): two trainers built side by side (a sweep, two
        # processes) get different folders.
        version = max(versions, default=-1) + 1
        while True:
            folder = os.path.join(root, f"version_{version}")
            try:
                os.makedirs(folder)
                _claims.folder = folder
                break
            except FileExistsError:
                version += 1
    train = dict(train, metrics_path=os.path.join(folder, "metrics.jsonl"),
                 tensorboard_dir=os.path.join(folder, "tb"),
                 checkpoint=dict(checkpoint, dir=os.path.join(folder, "checkpoints")))
    return dict(config, train=train)


def checkpoint_root(config):
    """train.checkpoint.dir as the core settles it for `config` (a mapping already through
    with_run_folder, JSON text, or a file path): the named folder, else runs/<name>/checkpoints
    (name: the file's stem, "run" for text). None when the config cannot be read here."""
    try:
        if isinstance(config, Mapping):
            json_config, name = config, "run"
        elif isinstance(config, str) and config.lstrip().startswith("{"):
            json_config, name = json.loads(config), "run"
        else:
            path = os.fspath(config)
            with open(path) as source:
                json_config = json.load(source)
            name = os.path.splitext(os.path.basename(path))[0]
        train = json_config.get("train", {})
        folder = train.get("checkpoint", {}).get("dir", "") if isinstance(train, Mapping) else ""
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    if not isinstance(folder, str):
        return None
    return folder or os.path.join("runs", name, "checkpoints")
