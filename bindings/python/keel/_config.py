"""Turning a Python config into the JSON text the core reads: dicts and lists as they are,
NumPy and PyTorch scalars (anything with .tolist() or .item(), such as np.int64(4),
np.float32(1e-3) or a 0-d tensor) as the plain numbers they hold; anything else is refused
with keel.Error naming the config path where it was found."""
import json
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
