"""The `keel` command that pip installs (pyproject.toml's [project.scripts]): replaces this
Python process with the keel executable shipped inside the package (keel/bin/keel), so it
behaves exactly as a `keel` built from source: same arguments, exit status and signals."""
import os
import pathlib
import sys


def executable():
    """The path of the keel executable inside the installed package."""
    return pathlib.Path(__file__).resolve().parent / "bin" / "keel"


def main():
    path = executable()
    if not os.access(path, os.X_OK):
        sys.exit(f"keel: the keel executable is missing from the package ({path}); reinstall the keel package")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, [str(path), *sys.argv[1:]])


if __name__ == "__main__":
    main()
