#!/usr/bin/env python3
"""Every repository path and every "doc.md §N" that a doc or a comment cites must exist.

What is read:
  - Markdown: README.md, docs/*.md, and every README.md under examples/ and bindings/, whole.
  - Comments (and Python/Julia docstrings) of the sources under core, plugins, abi/keel, bindings,
    tests, scripts, benchmarks, examples, kernels and cmake, plus CMakeLists.txt files.

What counts as a cited path: a token of path characters with a "/" in it (a/b/c.cpp, docs/x.md,
keel_support/x.hpp), or a bare file name ending in a source or doc extension (plot.h, offload.md).
A path is checked when its first part is a top-level entry of the repository or an installed
location below (include/, share/doc/keel/), or when it ends in such an extension and its first part
names a folder of the tree (metrics/plot.h, keel/plot.py). Anything else is where a user's or
another project's files are, not a citation: runs/x/metrics.jsonl, /mnt/nvme/keel,
transformers/models/gpt2/..., keel/bin/keel inside a wheel. Skipped too: URLs, absolute paths,
build-tree paths (build/...), templates (<name>, X.Y, NNN, ..., {a,b}, $VAR, a name followed by
<i> or {i}), and the names in NOT_FILES (other projects' files, system headers, example names).

How a path is resolved, the first that exists wins (a file, a folder, or with * a glob match):
  1. the repository root (core/src/train/trainer.cpp);
  2. the citing file's folder or any folder above it (keel/plot.py cited from bindings/python);
  3. an include root: core/src (metrics/plot.h), core/cli, core/support, abi, plugins, kernels;
  4. an installed location, mapped back to its source:
       include/keel/X, keel/X.h    -> abi/keel/X
       include/keel_support/X      -> core/support/keel_support/X   (keel_support/X as in 3)
       share/doc/keel/X.md         -> docs/X.md, as CMakeLists.txt installs them; the installed
                                      plugin-authors-guide.md and example-localsgd/ are
                                      examples/plugins/localsgd (README.md), example-schedule/
                                      and example-offload/ the two other examples
  5. a bare file name: any tracked file of that name (or an installed doc's name, as in 4).
Paths that leave the repository (../shared/DESIGN.md) fail.

Sections: "NAME.md §N" (also "NAME.md section N", "[x](NAME.md) §N", "NAME.md §4, §6") needs a
heading "## N." in that doc, found as a path above; "§N.M" needs "### N.M". In a Markdown file a
bare "§N" means its own heading N. In a comment a bare "§N" names no document and fails.

Known failures: scripts/citation_exceptions.txt lists citations known to be broken in files their
owners will fix (file, cited text, why). They are reported but do not fail the check; a listed one
that no longer occurs does fail it, so the list only shrinks.

Usage: scripts/check_citations.py [--root DIR] [FILE ...]
  With FILEs, only those are read (by extension: .md whole, else comments); paths still resolve
  against the repository. Prints file:line: what is missing, one a line; exits 1 if any, else 0.
  ctest runs it as docs.citations, and docs.citations_catch_breakage checks that it can fail.
"""
import argparse
import fnmatch
import io
import os
import re
import subprocess
import sys
import tokenize

SOURCE_EXTENSIONS = {".h", ".hpp", ".c", ".cpp", ".cu", ".cuh", ".py", ".pyi", ".sh", ".cmake", ".md",
                     ".jl", ".rs", ".i", ".java", ".toml"}
C_LIKE = {".h", ".hpp", ".c", ".cpp", ".cu", ".cuh", ".rs", ".i", ".java"}
HASH_COMMENTS = {".sh", ".cmake", ".toml", ".txt", ".yml", ".yaml", ".in"}
SCANNED_FOLDERS = ("core", "plugins", "abi/keel", "bindings", "tests", "scripts", "benchmarks", "examples",
                   "kernels", "cmake")
# This script and its test hold examples of citations, most of them broken on purpose.
NOT_READ = {"scripts/check_citations.py", "tests/docs/check_citations_test.py", "scripts/citation_exceptions.txt"}
INCLUDE_ROOTS = ("core/src", "core/cli", "core/support", "abi", "plugins", "kernels")
INSTALLED_DOCS = {"plugin-authors-guide.md": "examples/plugins/localsgd/README.md",
                  "example-localsgd": "examples/plugins/localsgd", "example-schedule": "examples/plugins/schedule-1f1b",
                  "example-offload": "examples/plugins/offload-files", "example-*": "examples/plugins/*", "": "docs"}
# Names that look like files but are not this tree's: other projects' files, system and library
# headers, and the example name plugin-contract.md §7 builds.
NOT_FILES = {"llm.c", "train_gpt2.c", "train_gpt2.py", "dlpack.h", "pjrt_c_api.h", "ggml-backend-reg.cpp",
             "setup.py", "stdint.h", "stddef.h", "cblas.h", "mpi.h", "Python.h", "my_plugin.cpp"}

PATH_TOKEN = re.compile(r"(?<![\w./\-*~:])(\.{0,2}/?[\w\-*.]+(?:/[\w\-*.]+)*/?)")
SECTION = re.compile(r"([\w./\-]+\.md)(?:[`)\]*]|\]\([^)]*\))*\s*(?:§|section\s+)\s*"
                     r"(\d+(?:\.\d+)?(?:\s*(?:,|and|or)\s*§?\s*\d+(?:\.\d+)?)*)")
BARE_SECTION = re.compile(r"§\s*(\d+(?:\.\d+)?)")
URL = re.compile(r"\w+://\S+")
TEMPLATE_MARKS = ("<", ">", "{", "}", "$", "X.Y", "NNN", "...", "…", "vX")


class Tree:
    """The repository's tracked (and new, not ignored) files, and the folders that hold them."""

    def __init__(self, root):
        self.root = root
        try:
            listing = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard"],
                                     capture_output=True, text=True, check=True).stdout.split("\n")
            self.files = {f for f in listing if f and os.path.exists(os.path.join(root, f))}
        except (OSError, subprocess.CalledProcessError):
            self.files = set()
            for folder, dirs, names in os.walk(root):
                dirs[:] = [d for d in dirs if d not in (".git", "build")]
                self.files.update(os.path.relpath(os.path.join(folder, n), root) for n in names)
        self.folders = {os.path.dirname(f) for f in self.files}
        for folder in list(self.folders):
            while folder:
                folder = os.path.dirname(folder)
                self.folders.add(folder)
        self.top = {p.split("/")[0] for p in self.files}
        self.by_name = {}
        for f in self.files:
            self.by_name.setdefault(os.path.basename(f), []).append(f)

    def exists(self, rel):
        rel = os.path.normpath(rel).replace(os.sep, "/")
        if rel.startswith("../") or rel == "..":
            return None
        if rel == ".":
            return rel
        if "*" in rel:
            return rel if any(fnmatch.fnmatchcase(f, rel) for f in self.files) else None
        return rel if rel in self.files or rel in self.folders else None


def candidates(path, citing_folder):
    """Repository-relative places `path` may mean, in the order of the module docstring."""
    path = path.rstrip("/")
    yield path
    folder = citing_folder
    while folder:
        yield f"{folder}/{path}"
        folder = os.path.dirname(folder)
    for root in INCLUDE_ROOTS:
        yield f"{root}/{path}"
    for prefix, source in (("include/keel/", "abi/keel/"), ("include/keel_support/", "core/support/keel_support/"),
                           ("include/", "abi/")):
        if path.startswith(prefix):
            yield source + path[len(prefix):]
    if path == "share/doc/keel" or path.startswith("share/doc/keel/"):
        name = path[len("share/doc/keel/"):].rstrip("/")
        head, _, rest = name.partition("/")  # an installed example's folder maps as a whole
        if head in INSTALLED_DOCS and head:
            yield INSTALLED_DOCS[head] + ("/" + rest if rest else "")
        else:
            yield INSTALLED_DOCS.get(name, "docs/" + name)


def is_checked(path, tree):
    if URL.match(path) or path.startswith("/") or path.startswith("build/") or path.startswith("~"):
        return False
    if any(mark in path for mark in TEMPLATE_MARKS):
        return False
    stripped = path.rstrip("/")
    if not stripped or stripped in (".", "..") or set(stripped) <= set("./-*"):
        return False
    first = stripped.split("/")[0]
    extension = os.path.splitext(stripped)[1]
    if "/" not in stripped:  # a bare name: only source and doc files, never a folder
        return extension in SOURCE_EXTENSIONS and not path.endswith("/") and stripped not in NOT_FILES \
            and stripped.count(".") == 1 and not re.fullmatch(r"[\d.]+\w*", stripped)
    if first == "..":
        return True  # leaves the repository: always a failure
    if first in tree.top or stripped.startswith(("include/", "share/doc/keel")):
        return True
    return extension in SOURCE_EXTENSIONS and any(f == first or f.endswith("/" + first) for f in tree.folders)


def resolve(path, citing_rel, tree):
    citing_folder = os.path.dirname(citing_rel) if citing_rel else ""
    stripped = path.rstrip("/")
    if "/" not in stripped:
        if stripped in tree.by_name:
            return tree.by_name[stripped][0]
        if stripped in INSTALLED_DOCS:
            return INSTALLED_DOCS[stripped]
        if tree.exists(f"{citing_folder}/{stripped}" if citing_folder else stripped):
            return stripped
        return None
    for candidate in candidates(path, citing_folder):
        found = tree.exists(candidate)
        if found:
            return found
    return None


# ---- what a file says: its comments, or all of a Markdown file ---------------------------------

def c_comments(text):
    """(line, comment text) of // and /* */ comments, skipping string and character literals."""
    out, i, n, line = [], 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append((line, text[i + 2:end]))
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end
            for k, part in enumerate(text[i + 2:end].split("\n")):
                out.append((line + k, part))
            line += text.count("\n", i, end)
            i = end + 2
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            open_paren = text.find("(", i)
            delimiter = ")" + text[i + 2:open_paren] + '"'
            end = text.find(delimiter, open_paren)
            end = n if end < 0 else end + len(delimiter)
            line += text.count("\n", i, end)
            i = end
        elif c in "\"'":
            if c == "'" and i > 0 and (text[i - 1].isalnum()):  # a digit separator (1'000) or Rust lifetime
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        else:
            i += 1
    return out


def python_comments(text):
    out = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                out.append((token.start[0], token.string[1:]))
            elif token.type == tokenize.STRING and token.string.lstrip("rbuRBUfF").startswith(('"""', "'''")):
                for k, part in enumerate(token.string.split("\n")):
                    out.append((token.start[0] + k, part))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return hash_comments(text)
    return out


def hash_comments(text, docstrings=False):
    """# comments of shell, CMake, TOML and Julia (whose \"\"\" docstrings count too)."""
    out, in_doc = [], False
    for number, line in enumerate(text.split("\n"), 1):
        if docstrings and line.count('"""') % 2 == 1:
            in_doc = not in_doc
            out.append((number, line))
            continue
        if in_doc:
            out.append((number, line))
            continue
        quote = None
        for k, c in enumerate(line):
            if quote:
                if c == quote:
                    quote = None
            elif c in "\"'":
                quote = c
            elif c == "#" and (k == 0 or line[k - 1] in " \t([;"):
                out.append((number, line[k + 1:]))
                break
    return out


def cited_text(path, text):
    extension = os.path.splitext(path)[1]
    name = os.path.basename(path)
    if extension == ".md":
        return list(enumerate(text.split("\n"), 1))
    if extension in C_LIKE:
        return c_comments(text)
    if extension in (".py", ".pyi"):
        return python_comments(text)
    if extension == ".jl":
        return hash_comments(text, docstrings=True)
    if extension in HASH_COMMENTS or name == "CMakeLists.txt" or name.endswith(".sh"):
        return hash_comments(text)
    return []


def scanned_files(tree):
    for f in sorted(tree.files):
        name, extension = os.path.basename(f), os.path.splitext(f)[1]
        if f in NOT_READ:
            continue
        if extension == ".md":
            if f == "README.md" or (f.startswith("docs/") and f.count("/") == 1) or \
                    (name == "README.md" and f.startswith(("examples/", "bindings/"))):
                yield f
        elif f.startswith(tuple(folder + "/" for folder in SCANNED_FOLDERS)) or name == "CMakeLists.txt":
            if extension in C_LIKE or extension in (".py", ".pyi", ".jl") or extension in HASH_COMMENTS \
                    or name == "CMakeLists.txt":
                yield f


# ---- sections -----------------------------------------------------------------------------------

_headings = {}


def numbered_headings(text):
    """The numbers of a Markdown text's numbered headings: "## 5. Title" gives "5"."""
    return {m.group(1) for m in re.finditer(r"(?m)^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s", text)}


def headings(rel, tree):
    if rel not in _headings:
        with open(os.path.join(tree.root, rel), encoding="utf-8") as f:
            _headings[rel] = numbered_headings(f.read())
    return _headings[rel]


def describe_sections(numbers):
    top = sorted((n for n in numbers if "." not in n), key=int)
    return f"sections {', '.join(top)}" if top else "no numbered sections"


# ---- the check ----------------------------------------------------------------------------------

def check_file(display, citing_rel, text, tree):
    """[(line, cited text, problem)] for one file."""
    problems = []
    is_markdown = display.endswith(".md")
    own_headings = numbered_headings(text) if is_markdown else set()
    for number, chunk in cited_text(display, text):
        chunk = URL.sub(" ", chunk)
        for match in SECTION.finditer(chunk):
            doc = match.group(1)
            target = resolve(doc, citing_rel, tree) if is_checked(doc, tree) else None
            for section in re.findall(r"\d+(?:\.\d+)?", match.group(2)):
                cited = f"{doc} §{section}"
                if target is None:
                    problems.append((number, cited, f"cites {cited}, but {doc} is not in the repository"))
                elif section not in headings(target, tree):
                    problems.append((number, cited, f"cites {cited}, but {target} has "
                                     f"{describe_sections(headings(target, tree))}"))
        chunk = SECTION.sub(" ", chunk)  # the docs named with a § were resolved above
        for match in BARE_SECTION.finditer(chunk):
            section = match.group(1)
            if not is_markdown:
                problems.append((number, f"§{section}", f"cites §{section} without naming the document "
                                 f"(write docs/NAME.md §{section})"))
            elif section not in own_headings:
                problems.append((number, f"§{section}", f"cites §{section} of this page, which has "
                                 f"{describe_sections(own_headings)}"))
        for match in PATH_TOKEN.finditer(chunk):
            if chunk[match.end():match.end() + 1] in ("<", "{", "$"):
                continue  # the start of a template: transformer.h.<i>.attn
            path = match.group(1).rstrip(".")
            if path.endswith("/."):
                path = path[:-2]
            if is_checked(path, tree) and resolve(path, citing_rel, tree) is None:
                where = "leaves the repository" if path.startswith("..") else "does not exist"
                problems.append((number, path, f"cites {path}, which {where}"))
    return problems


def read_exceptions(root):
    """{(file, cited text): why} from scripts/citation_exceptions.txt: 'FILE | CITED | WHY' lines."""
    exceptions = {}
    path = os.path.join(root, "scripts", "citation_exceptions.txt")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip() and not line.lstrip().startswith("#"):
                    file, cited, why = (part.strip() for part in line.split("|", 2))
                    exceptions[(file, cited)] = why
    return exceptions


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("files", nargs="*", help="read only these (default: every doc and source comment)")
    args = parser.parse_args(argv)
    tree = Tree(os.path.abspath(args.root))
    if args.files:
        targets = []
        for f in args.files:
            absolute = os.path.abspath(f)
            rel = os.path.relpath(absolute, tree.root)
            targets.append((f, None if rel.startswith("..") else rel, absolute))
    else:
        targets = [(f, f, os.path.join(tree.root, f)) for f in scanned_files(tree)]
    exceptions = read_exceptions(tree.root) if not args.files else {}
    failures, known, seen = [], [], set()
    for display, rel, absolute in targets:
        with open(absolute, encoding="utf-8", errors="replace") as f:
            found = check_file(display, rel, f.read(), tree)
        for number, cited, problem in sorted(set(found), key=found.index):  # [a.md](a.md) once
            line = f"{display}:{number}: {problem}"
            if (display, cited) in exceptions:
                seen.add((display, cited))
                known.append(f"{line} (known: {exceptions[(display, cited)]})")
            else:
                failures.append(line)
    for (file, cited), why in sorted(exceptions.items()):
        if (file, cited) not in seen:
            failures.append(f"scripts/citation_exceptions.txt: {file}'s citation of {cited} is no longer broken; "
                            "remove the line")
    for line in known:
        print(line)
    for line in failures:
        print(line)
    print(f"check_citations: {len(targets)} files read, {len(failures)} broken citation(s)"
          + (f", {len(known)} known and listed in scripts/citation_exceptions.txt" if known else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
