#!/usr/bin/env python3
"""The GPU tests of a build tree, for scripts/device-check.sh: reads `ctest --show-only=json-v1`
on stdin and prints one line per test labelled gpu, tab-separated: name, timeout in seconds,
skip return code, environment ("-" when empty: bash's read merges empty tab-separated fields)
and command, each list joined by \\x1f.

ctest lists a test's command only once its program exists, so before the build the command is
read from the add_test line that ctest itself reads (build/**/CTestTestfile.cmake).

Usage: ctest --test-dir BUILD -L gpu --show-only=json-v1 | device_check_tests.py BUILD
"""
import glob
import json
import os
import re
import sys

ADD_TEST = re.compile(r"add_test\(\[=\[(.*?)\]=\]\s+(.*)\)\s*$")
QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def commands_in_testfiles(build):
    """Every test's command as CMake wrote it into build/**/CTestTestfile.cmake."""
    commands = {}
    for path in glob.glob(os.path.join(build, "**", "CTestTestfile.cmake"), recursive=True):
        with open(path) as testfile:
            for line in testfile:
                match = ADD_TEST.match(line)
                if match:
                    commands[match.group(1)] = [re.sub(r"\\(.)", r"\1", arg) for arg in QUOTED.findall(match.group(2))]
    return commands


def main():
    build = sys.argv[1]
    fallback = None
    for test in json.load(sys.stdin).get("tests", []):
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        if "gpu" not in props.get("LABELS", []) or props.get("DISABLED"):
            continue
        command = test.get("command")
        if not command:
            fallback = fallback if fallback is not None else commands_in_testfiles(build)
            command = fallback.get(test["name"])
        if not command:
            sys.exit("device-check: cannot find the command of test %s in %s" % (test["name"], build))
        fields = [test["name"], str(int(float(props.get("TIMEOUT", 600)))), str(props.get("SKIP_RETURN_CODE", 77)),
                  "\x1f".join(props.get("ENVIRONMENT", [])) or "-", "\x1f".join(command)]
        if any("\t" in field or "\n" in field for field in fields):
            sys.exit("device-check: test %s has a tab or newline in its command or environment" % test["name"])
        print("\t".join(fields))


if __name__ == "__main__":
    main()
