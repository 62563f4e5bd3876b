"""keel.plugins(): the installed package finds its built-in plugins by itself (no environment
variable), and Python-registered plugins are listed with an empty path."""
import os
import pathlib

import pytest

import keel
from conftest import unique_name


def test_builtin_plugins_are_found_beside_the_package():
    assert "KEEL_PLUGIN_PATH" not in os.environ
    found = {(p["kind"], p["name"]): p for p in keel.plugins()}
    for kind, name in [("backend", "cpu"), ("model", "gpt"), ("optimizer", "adamw"), ("strategy", "ddp")]:
        plugin = found[(kind, name)]
        assert plugin["abi"] == keel.ABI_VERSION and plugin["version"]
        path = pathlib.Path(plugin["path"])
        assert path.name == f"libkeel-{name}.so"
        assert path.parent == pathlib.Path(keel.__file__).parent / "keel" / "plugins"


def test_python_plugins_are_listed():
    name = unique_name("listed")
    keel.register_data_source(name, lambda section: iter(()), description="listed in plugins()")
    (entry,) = [p for p in keel.plugins() if p["name"] == name]
    assert entry == {"kind": "data", "name": name, "version": "0.1.0", "abi": keel.ABI_VERSION, "path": "",
                     "description": "listed in plugins()"}


def test_register_plugin_library_refuses_a_missing_file(tmp_path):
    with pytest.raises(keel.Error, match="libkeel-missing.so"):
        keel.register_plugin_library(tmp_path / "libkeel-missing.so")
