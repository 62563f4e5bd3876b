"""The Python examples of the front pages (README.md, bindings/python/README.md, docs/*.md) run as
written in a venv holding only the wheel (conftest's wheel_venv: no torch, no checkout, no
KEEL_PLUGIN_PATH), each in an empty folder. Every ```python block says what it is in its fence:
`python example` runs alone, `python example mpirun` also runs under `mpirun -np 2` (where the
comm must be picked by itself: the run's metrics hold the two ranks' all-reduce), and `python
fragment` is prose that is not run. An untagged block fails, and so does a file whose count of
examples differs from EXAMPLES_PER_FILE, so an example cannot drop out of the test unnoticed."""
import collections
import json
import os
import pathlib
import re
import shutil
import subprocess

import pytest

from conftest import REPO

FENCE = re.compile(r"^```python(?:[ \t]+(?P<tag>[^`]*?))?[ \t]*$")
KINDS = ("example", "example mpirun", "fragment")
# (file, kind) -> how many blocks of that kind the file holds.
EXAMPLES_PER_FILE = {
    ("README.md", "example mpirun"): 1,
    ("bindings/python/README.md", "example"): 1,
    ("docs/python.md", "example"): 4,
    ("docs/metrics.md", "fragment"): 1,  # plot_metrics needs matplotlib and a run's metrics file
    ("docs/finetuning.md", "fragment"): 2,  # a base model and its adapters; conversations and a tokenizer folder
}


def front_pages():
    return [REPO / "README.md", REPO / "bindings" / "python" / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def python_blocks():
    """(file relative to the repository, first line number, kind, code) of every ```python block."""
    blocks = []
    for page in front_pages():
        lines = page.read_text().splitlines()
        start = None
        for number, line in enumerate(lines, 1):
            opening = FENCE.match(line) if start is None else None
            if opening:
                start, kind, code = number, (opening.group("tag") or "").strip(), []
            elif start is not None and line.startswith("```"):
                blocks.append((str(page.relative_to(REPO)), start, kind, "\n".join(code) + "\n"))
                start = None
            elif start is not None:
                code.append(line)
        assert start is None, f"{page}:{start}: a ```python block that never closes"
    return blocks


BLOCKS = python_blocks()
EXAMPLES = [block for block in BLOCKS if block[2].startswith("example")]


def test_every_python_block_says_what_it_is_and_no_example_went_missing():
    untagged = [f"{page}:{line} ```python {kind}" for page, line, kind, _ in BLOCKS if kind not in KINDS]
    assert not untagged, f"tag each block ```python example, example mpirun or fragment: {untagged}"
    counted = collections.Counter((page, kind) for page, _, kind, _ in BLOCKS)
    assert dict(counted) == EXAMPLES_PER_FILE


def clean_env():
    """The caller's environment without what would let the examples reach the checkout."""
    return {k: v for k, v in os.environ.items()
            if k not in ("KEEL_PLUGIN_PATH", "KEEL_OPENBLAS_LIBRARY", "PYTHONPATH", "KEEL_TEST_BUILD_DIR")}


def run_example(command, folder, env):
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.parametrize("page,line,kind,code", EXAMPLES, ids=[f"{p}:{n}" for p, n, _, _ in EXAMPLES])
def test_the_example_runs_from_the_wheel_alone(wheel_venv, tmp_path, page, line, kind, code):
    script = tmp_path / "example.py"
    script.write_text(code)
    run_example([str(wheel_venv / "bin" / "python"), str(script)], tmp_path, clean_env())
    if kind != "example mpirun":
        return
    # Again on two ranks, in a fresh folder, as the page says to run it.
    mpirun = shutil.which("mpirun")
    assert mpirun, "mpirun is not installed (scripts/install-deps.sh installs openmpi-bin)"
    ranks = tmp_path / "two-ranks"
    ranks.mkdir()
    env = dict(clean_env(), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    done = run_example([mpirun, "--oversubscribe", "-np", "2", str(wheel_venv / "bin" / "python"), str(script)],
                       ranks, env)
    assert "joined a world of 2 ranks" in done.stderr, done.stderr[-3000:]
    metrics = sorted(ranks.rglob("metrics.jsonl"))
    assert len(metrics) == 1, metrics
    last = json.loads(metrics[0].read_text().splitlines()[-1])
    assert last["comm_bytes_per_step"]["all_reduce"] > 0, last
