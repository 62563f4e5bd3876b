"""Shared fixtures: the quick-start config made small (4 x 64-token micro-batches, no
TensorBoard, files under pytest's tmp_path), and unique names for Python plugins, which live
for the whole process and so must not repeat across tests, and the wheel of this build with a venv
that holds only it (test_wheel.py, test_docs_examples.py)."""
import copy
import itertools
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD_DIR = pathlib.Path(os.environ.get("KEEL_TEST_BUILD_DIR", os.getcwd()))
QUICKSTART = REPO / "examples" / "quickstart.json"
_names = itertools.count()


def unique_name(prefix):
    return f"{prefix}_{next(_names)}"


def small_config(tmp_path):
    config = json.loads(QUICKSTART.read_text())
    config["data"].update({"micro_batch": 4, "global_batch": 4, "seq_len": 64, "val_batches": 2})
    config["train"].update({
        "tensorboard_dir": "none",
        "checkpoint": {"dir": str(tmp_path / "checkpoints")},
        "metrics_path": str(tmp_path / "metrics.jsonl"),
        "sample_tokens": 0,
    })
    return config


@pytest.fixture
def config(tmp_path):
    return small_config(tmp_path)


def with_sgd(config, lr=0.05):
    """The config with plain SGD (no momentum, no decay) and a constant learning rate."""
    config = copy.deepcopy(config)
    config["optimizer"] = {"plugin": "sgd", "lr": lr, "momentum": 0, "weight_decay": 0}
    config["lr_schedule"] = {"warmup_steps": 0, "decay": "constant"}
    return config


def run_two_ranks(script, config, mode, out):
    """Runs tests/mpi/<script> under `mpirun -np 2` with the config as JSON, a mode word and the
    folder `out`, where each rank writes rank<R>.json; returns the two ranks' results."""
    mpirun = shutil.which("mpirun")
    assert mpirun, "mpirun is not installed (scripts/install-deps.sh installs openmpi-bin)"
    path = pathlib.Path(__file__).parent / "mpi" / script
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    out.mkdir()
    done = subprocess.run([mpirun, "--oversubscribe", "-np", "2", sys.executable, str(path), json.dumps(config), mode,
                           str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.fixture(scope="session")
def wheel(tmp_path_factory):
    """The cp311 wheel of this build (scripts/build-wheel.sh over BUILD_DIR: only the extension
    compiles), for /usr/bin/python3, the interpreter of wheel_venv."""
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(["bash", str(REPO / "scripts" / "build-wheel.sh"), str(out), str(BUILD_DIR),
                           "--python", "/usr/bin/python3"], capture_output=True, text=True, timeout=3000)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # The compile's progress reaches the terminal (pip -v): Ninja's "[n/N] ..." lines, at least
    # the re-check of the source globs that every build starts with.
    assert re.search(r"^\s*\[\d+/\d+\] ", done.stdout + done.stderr, re.MULTILINE), done.stdout[-3000:]
    wheels = list(out.glob("keel-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="session")
def wheel_venv(wheel, tmp_path_factory):
    """A venv of /usr/bin/python3 without system site packages (neither Debian's numpy nor its
    torch) holding the wheel and what pip brings with it (numpy, scipy-openblas32), nothing else."""
    venv = tmp_path_factory.mktemp("wheel-venv") / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True)
    start = time.monotonic()
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           str(wheel)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    print(f"pip install of {wheel.name} in a clean venv: {time.monotonic() - start:.1f} s")
    return venv
