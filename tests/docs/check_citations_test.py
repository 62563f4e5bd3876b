#!/usr/bin/env python3
"""scripts/check_citations.py can fail: fed a Markdown page and a C++ file with citations that are
broken (a missing path, a missing §, a bare § in a comment, a path out of the repository) beside
ones that hold (a real path, an include-relative one, an installed header, a real §, a path in a
string literal rather than a comment), it must exit 1 and name exactly the broken ones, by
file:line. And scripts/citation_exceptions.txt: a listed broken citation passes, a listed one
that no longer fails is itself a failure. Usage: check_citations_test.py SCRIPT"""
import os
import re
import subprocess
import sys
import tempfile

PAGE = """# A page

## 1. Real

See `docs/plugin-contract.md` §5 and [the architecture](docs/architecture.md) §2, and `keel/offload.h`.
Broken: `core/src/train/no_such_runner.cpp` and plugin-contract.md §42.
Also broken: docs/parallelism.md §2, §77 (the second), and §9 of this page.
Out of the tree: ../shared/DESIGN.md. Not a citation: runs/x/metrics.jsonl, /mnt/nvme/keel.
"""

SOURCE = """// Cites metrics/metrics_log.h and keel_support/param_store.hpp, which exist.
// Cites plugins/strategy-zero/no_such_layout.hpp, which does not.
const char* not_a_comment = "core/src/no/such/file.cpp";  // but docs/offload.md §3 is real
/* A bare §2 names no document. */
"""

EXPECTED = {
    ("page.md", 6, "core/src/train/no_such_runner.cpp"),
    ("page.md", 6, "plugin-contract.md §42"),
    ("page.md", 7, "docs/parallelism.md §77"),
    ("page.md", 7, "§9"),
    ("page.md", 8, "../shared/DESIGN.md"),
    ("source.cpp", 2, "plugins/strategy-zero/no_such_layout.hpp"),
    ("source.cpp", 4, "§2"),
}


def check_exceptions(script):
    """A tree of its own (no git: the script walks the folder): docs/a.md cites one missing file
    that the exceptions list names, and the list names a second citation that is not broken."""
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        os.makedirs(os.path.join(root, "scripts"))
        open(os.path.join(root, "docs", "a.md"), "w").write("# A\n\nSee `docs/gone.md` and `docs/a.md`.\n")
        exceptions = os.path.join(root, "scripts", "citation_exceptions.txt")
        open(exceptions, "w").write("# known\ndocs/a.md | docs/gone.md | its owner will fix it\n")
        p = subprocess.run([sys.executable, script, "--root", root], capture_output=True, text=True)
        print(p.stdout + p.stderr)
        if p.returncode != 0 or "(known: its owner will fix it)" not in p.stdout:
            print(f"FAIL: a listed broken citation should pass, reported; exit {p.returncode}")
            return False
        open(exceptions, "a").write("docs/a.md | docs/a.md | not broken at all\n")
        p = subprocess.run([sys.executable, script, "--root", root], capture_output=True, text=True)
        print(p.stdout + p.stderr)
        stale = "docs/a.md's citation of docs/a.md is no longer broken; remove the line"
        if p.returncode != 1 or stale not in p.stdout:
            print(f"FAIL: a listed citation that is not broken should fail the check; exit {p.returncode}")
            return False
    return True


def main(script):
    with tempfile.TemporaryDirectory() as folder:
        page, source = os.path.join(folder, "page.md"), os.path.join(folder, "source.cpp")
        open(page, "w").write(PAGE)
        open(source, "w").write(SOURCE)
        p = subprocess.run([sys.executable, script, page, source], capture_output=True, text=True)
        print(p.stdout + p.stderr)
        found = set()
        for line in p.stdout.splitlines():
            m = re.match(r".*/(page\.md|source\.cpp):(\d+): cites (.+?)(?:,| without| of this page)", line)
            if m:
                found.add((m.group(1), int(m.group(2)), m.group(3)))
        missed, extra = EXPECTED - found, found - EXPECTED
        if p.returncode != 1 or missed or extra:
            print(f"FAIL: exit {p.returncode} (expected 1); not reported: {sorted(missed)}; "
                  f"reported but fine: {sorted(extra)}")
            return 1
    if not check_exceptions(script):
        return 1
    print(f"PASS: the check exits 1 and names the {len(EXPECTED)} broken citations, and only those; "
          "the exceptions list excuses what it names and fails on what it no longer needs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
