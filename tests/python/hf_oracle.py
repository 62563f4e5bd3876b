"""The transformers oracle's interpreter, shared by the scripts that compare Keel with
transformers: ensure_oracle(venv) returns when transformers imports here, else makes the venv
(scripts/hf-venv.sh: Debian's torch, transformers from PyPI) and re-runs the calling script in
it; it exits 77 (ctest's skip) only when PyPI is out of reach."""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ensure_oracle(venv, pin=None):
    """`pin` ("transformers==X"): that release, in a venv of its own, rather than hf-venv.sh's default."""
    try:
        import transformers
        if pin is None or transformers.__version__ == pin.split("==")[1]:
            return
    except ImportError:
        pass
    command = ["bash", os.path.join(REPO, "scripts", "hf-venv.sh"), venv] + ([pin] if pin else [])
    made = subprocess.run(command, capture_output=True, text=True)
    if made.returncode == 77:
        print("SKIPPED: no transformers venv (PyPI out of reach):", made.stderr.strip())
        sys.exit(77)
    if made.returncode != 0:
        sys.exit(f"scripts/hf-venv.sh {venv} failed ({made.returncode}):\n{made.stderr}")
    os.execv(os.path.join(venv, "bin", "python"), [os.path.join(venv, "bin", "python")] + sys.argv)
