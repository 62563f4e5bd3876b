"""The wheel (conftest's wheel fixture: scripts/build-wheel.sh, whose compile shows CMake's
progress): a manylinux wheel that carries the shared libraries Keel links, installs with pip into a clean venv (no system site packages: neither Debian's numpy nor
its torch) and trains there as the source build does, loading OpenBLAS from PyPI's
scipy-openblas32 rather than the system's, and resolving every library its ELF files need inside
the venv or among the few system libraries manylinux allows."""
import json
import os
import subprocess
import zipfile

import pytest

import keel
from conftest import REPO, small_config

# The system libraries a manylinux wheel may use; the CUDA, NCCL and MPI libraries are left out
# of the wheel on purpose (build-wheel.sh): the plugins needing them load where they exist.
ALLOWED_SYSTEM = ("libc.so", "libm.so", "libstdc++.so", "libgcc_s.so", "libpthread.so", "libdl.so", "librt.so",
                  "ld-linux-x86-64.so", "linux-vdso.so")
LEFT_OUT = ("libcudart.so", "libcublasLt.so", "libcublas.so", "libnccl.so", "libmpi.so")

PROBE = r"""
import json, subprocess, sys, pathlib
import keel
config = json.loads(sys.argv[1])
trainer = keel.Trainer(config, verbose=False)
losses = [trainer.step()["loss"] for _ in range(4)]
maps = open("/proc/self/maps").read().splitlines()
openblas = sorted({line.split()[-1] for line in maps if "openblas" in line.lower()})
package = pathlib.Path(keel.__file__).parent
needed = {}
for elf in [*package.glob("*.so"), *package.glob("keel/plugins/*.so"), package / "bin" / "keel"]:
    ldd = subprocess.run(["ldd", str(elf)], capture_output=True, text=True).stdout
    needed[str(elf.relative_to(package))] = [line.strip() for line in ldd.splitlines()]
print(json.dumps({"losses": losses, "keel": keel.__file__, "openblas": openblas, "needed": needed}))
"""


def test_the_wheel_is_manylinux_and_carries_the_libraries_it_links(wheel):
    assert "-manylinux_" in wheel.name, wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    carried = [n for n in names if n.startswith("keel.libs/")]
    for library in ("liburing", "libgomp"):
        assert any(library in n for n in carried), (library, carried)
    assert not any(left in n for n in carried for left in LEFT_OUT), carried
    for part in ("keel/_keel", "keel/libkeel-core.so", "keel/keel/plugins/libkeel-cpu.so", "keel/bin/keel",
                 "keel/optim.py"):
        assert any(n.startswith(part) for n in names), part


def test_a_clean_venv_installs_it_and_trains_as_the_source_build(wheel_venv, tmp_path):
    venv = wheel_venv  # conftest: /usr/bin/python3's venv without system site packages, the wheel pip-installed
    python = str(venv / "bin" / "python")
    config = small_config(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("KEEL_PLUGIN_PATH", "KEEL_OPENBLAS_LIBRARY", "PYTHONPATH")}
    probe = subprocess.run([python, "-c", PROBE, json.dumps(config)], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=600)
    assert probe.returncode == 0, probe.stdout[-3000:] + probe.stderr[-3000:]
    report = json.loads(probe.stdout.splitlines()[-1])
    assert report["keel"].startswith(str(venv)), report["keel"]
    assert sum(not any(left in line for line in lines for left in LEFT_OUT) for lines in report["needed"].values()) >= 12
    assert report["openblas"] and all(path.startswith(str(venv)) and "scipy_openblas" in path
                                      for path in report["openblas"]), report["openblas"]
    for elf, lines in report["needed"].items():
        if any(left in line for line in lines for left in LEFT_OUT):
            continue  # the cuda, nccl and mpi plugins: their libraries, and what those need, come with CUDA or MPI
        for line in lines:
            if "=>" not in line:
                continue  # the dynamic loader itself and the vDSO
            name, path = line.split("=>")[0].strip(), line.split("=>")[1].split("(")[0].strip()
            if any(name.startswith(left) for left in LEFT_OUT):
                continue
            assert path.startswith(str(venv)) or name.startswith(ALLOWED_SYSTEM), f"{elf} needs {line}"
    source_build = keel.Trainer(config, verbose=False)
    expected = [source_build.step()["loss"] for _ in range(4)]
    assert report["losses"] == pytest.approx(expected, rel=1e-4)
    assert report["losses"][-1] < report["losses"][0]


def test_build_wheel_refuses_an_interpreter_it_cannot_build_for(tmp_path):
    """build-wheel.sh checks every --python before building anything: one that does not run, one
    older than pyproject's requires-python (a stand-in that answers as CPython 3.8), and two of
    one cpXY are refused with the reason, and no folder is made."""
    old = tmp_path / "python3.8"
    old.write_text("#!/bin/sh\necho 'CPython 3 8'\n")
    old.chmod(0o755)
    out = tmp_path / "out"
    for pythons, why in (([str(tmp_path / "nonesuch")], "does not run"),
                         ([str(old)], "is CPython 3.8; the keel package needs CPython 3.9 or newer"),
                         (["/usr/bin/python3", "/usr/bin/python3"], "two interpreters are cp3")):
        command = ["bash", str(REPO / "scripts" / "build-wheel.sh"), str(out)]
        for python in pythons:
            command += ["--python", python]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and why in done.stderr, (pythons, done.returncode, done.stderr)
        assert not out.exists()
