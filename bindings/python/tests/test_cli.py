"""pip install gives the `keel` command: the venv's bin/keel (a console script) runs the keel
executable shipped in the package."""
import pathlib
import subprocess
import sys

import keel._cli


def test_the_console_script_lists_plugins():
    script = pathlib.Path(sys.executable).parent / "keel"
    assert script.exists(), f"no console script at {script}"
    listed = subprocess.run([str(script), "plugins"], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert "gpt" in listed.stdout, listed.stdout
    assert str(keel._cli.executable().parent.parent) in listed.stdout  # the package's own plugins


def test_exit_status_comes_through():
    script = pathlib.Path(sys.executable).parent / "keel"
    failed = subprocess.run([str(script), "run", "/nonexistent/run.json"], capture_output=True, text=True, timeout=60)
    assert failed.returncode != 0
    assert "/nonexistent/run.json" in failed.stderr + failed.stdout
