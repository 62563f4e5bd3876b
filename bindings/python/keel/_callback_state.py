"""Callback state travels with the checkpoint, as Lightning keeps it: after the hooks of a step
that saved, rank 0 writes CHECKPOINT/callbacks.json holding each callback's state_dict() under
its state_key; Trainer(config, resume=...) and Trainer.load read it back into the callbacks
whose state_key matches. A resumed run's EarlyStopping and ModelCheckpoint then count on from
where the saved step left them, so they stop and save where an unbroken run would.

The file is read as untrusted input: at most FILE_LIMIT_BYTES, JSON of the shape written here,
and each callback bounds its own values in load_state_dict; a bad one raises keel.Error naming
the file. A checkpoint without the file (saved by `keel run`, or with no stateful callback)
leaves every callback as it was built."""
import json
import math
import os

from keel._keel import Error
from keel._world_end import launched_rank

FILE_NAME = "callbacks.json"
FORMAT = "keel.callbacks/1"
FILE_LIMIT_BYTES = 1 << 20
STEP_LIMIT = 1 << 40  # far beyond any run, as the data source's saved position is bounded

def states_of(callbacks):
    """{state_key: state_dict()} of the callbacks that keep a state."""
    states = {}
    for callback in callbacks:
        state = callback.state_dict()
        if state:
            states[callback.state_key] = state
    return states


def snapshot(callbacks):
    """The file's text for the callbacks' states as they are now; "" when there is nothing to
    write (no callback keeps a state, or this is not rank 0). Taken right after a saving step's
    hooks, so a checkpoint written later (asynchronously) still gets its own step's state."""
    states = states_of(callbacks)
    if not states or launched_rank() != 0:
        return ""
    return json.dumps({"format": FORMAT, "callbacks": states}, allow_nan=True, sort_keys=True)


def write(folder, text):
    """Writes folder/callbacks.json (atomically) holding a snapshot's text; False when the folder
    is not there yet (an asynchronous save still writing it), so the caller tries again later."""
    if not os.path.isdir(folder):
        return False
    if not text:
        return True
    temporary = os.path.join(folder, f".{FILE_NAME}.tmp-{os.getpid()}")
    with open(temporary, "w") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, os.path.join(folder, FILE_NAME))
    return True


def read(folder):
    """The {state_key: state} saved in folder/callbacks.json, {} when the checkpoint has none."""
    path = os.path.join(folder, FILE_NAME)
    if not os.path.lexists(path):
        return {}
    if not os.path.isfile(path):  # a folder, a FIFO (open would wait), a device, a dangling link
        raise Error(f"{path}: not a regular file; expected the callbacks state Keel writes beside a checkpoint")
    if os.path.getsize(path) > FILE_LIMIT_BYTES:
        raise Error(f"{path}: {os.path.getsize(path)} bytes; a callbacks state file holds at most "
                    f"{FILE_LIMIT_BYTES} (expected the one Keel writes beside a checkpoint)")
    try:
        with open(path) as source:
            saved = json.load(source)
    except (ValueError, UnicodeDecodeError) as error:
        raise Error(f"{path}: not JSON ({error}); expected the callbacks state Keel writes") from error
    except RecursionError as error:  # nesting deeper than Python's JSON decoder follows
        raise Error(f"{path}: JSON nested too deep; expected the callbacks state Keel writes") from error
    if not isinstance(saved, dict) or saved.get("format") != FORMAT or not isinstance(saved.get("callbacks"), dict):
        raise Error(f"{path}: expected {{\"format\": \"{FORMAT}\", \"callbacks\": {{state_key: state}}}}")
    for key, state in saved["callbacks"].items():
        if not isinstance(state, dict):
            raise Error(f"{path}: callbacks[{key!r}] is a {type(state).__name__}; expected an object")
    return saved["callbacks"]


def restore(folder, callbacks):
    """Loads each callback whose state_key the folder's file holds; a bad value raises naming the file."""
    states = read(folder)
    for callback in callbacks:
        state = states.get(callback.state_key)
        if state is None:
            continue
        try:
            callback.load_state_dict(state)
        except (ValueError, TypeError, KeyError, OverflowError) as error:
            # A KeyError's text is the bare key; an OverflowError is a JSON integer past a float.
            why = f"missing key {error}" if isinstance(error, KeyError) else str(error)
            raise Error(f"{os.path.join(folder, FILE_NAME)}: callbacks[{callback.state_key!r}]: {why}") from error


def loaded_folder(resume, checkpoint_root, step):
    """The checkpoint folder Trainer.load(resume) loaded at `step`: resume itself when it is one,
    else its step folder (checkpoints are named by step); "latest" is the config's
    checkpoint_root unless a folder of that name is here, as keel_trainer_load takes it. None
    when the root is unknown."""
    path = os.fspath(resume)
    if path == "latest" and not os.path.exists("latest"):
        path = checkpoint_root
    if path is None:
        return None
    if os.path.isfile(os.path.join(path, "manifest.json")):
        return path
    return os.path.join(path, f"step-{step:08d}")


def checked_number(state, key, allow_infinite=True):
    value = state[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or (
            not allow_infinite and math.isinf(value)):
        raise ValueError(f"{key} must be a number, found {value!r}")
    return float(value)


def checked_count(state, key, optional=False):
    value = state[key]
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= STEP_LIMIT:
        raise ValueError(f"{key} must be an int in [0, 2^40]{' or null' if optional else ''}, found {value!r}")
    return value


def checked_path(state, key):
    value = state[key]
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 4096:
        raise ValueError(f"{key} must be a path (a str of at most 4096 characters) or null, found {value!r:.80}")
    return value
