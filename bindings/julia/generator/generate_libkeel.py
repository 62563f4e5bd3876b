#!/usr/bin/python3
"""Writes bindings/julia/Keel.jl/src/LibKeel.jl, the raw Julia layer of the Keel C ABI.

Why generated: the ABI headers are the single contract (docs/architecture.md §8); a hand-copied
Julia mirror would drift the day a field is appended. libclang reads abi/keel/keel.h exactly
as a C compiler does, so struct field types, enum values and function signatures come from
the compiler's view, not from a regex over the text. The output is deterministic (no dates,
no absolute paths) and committed; a ctest test regenerates it and fails on any difference.

Run with Debian's python3 and python3-clang-14:
    /usr/bin/python3 bindings/julia/generator/generate_libkeel.py          # rewrite
    /usr/bin/python3 bindings/julia/generator/generate_libkeel.py --check  # diff only
"""
import argparse
import difflib
import os
import sys

import clang.cindex as ci

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
DEFAULT_HEADER = os.path.join(REPO, "abi", "keel", "keel.h")
DEFAULT_OUTPUT = os.path.join(REPO, "bindings", "julia", "Keel.jl", "src", "LibKeel.jl")
COMMAND = "/usr/bin/python3 bindings/julia/generator/generate_libkeel.py"

# C typedefs from <stdint.h>/<stddef.h> keep their meaning, not their platform's spelling.
STD_TYPEDEFS = {
    "int8_t": "Int8", "int16_t": "Int16", "int32_t": "Int32", "int64_t": "Int64",
    "uint8_t": "UInt8", "uint16_t": "UInt16", "uint32_t": "UInt32", "uint64_t": "UInt64",
    "size_t": "Csize_t", "ptrdiff_t": "Cptrdiff_t", "intptr_t": "Int", "uintptr_t": "UInt",
}
BUILTINS = {
    ci.TypeKind.VOID: "Cvoid", ci.TypeKind.BOOL: "Bool",
    ci.TypeKind.CHAR_S: "Cchar", ci.TypeKind.SCHAR: "Cchar", ci.TypeKind.CHAR_U: "Cuchar",
    ci.TypeKind.UCHAR: "Cuchar", ci.TypeKind.SHORT: "Cshort", ci.TypeKind.USHORT: "Cushort",
    ci.TypeKind.INT: "Cint", ci.TypeKind.UINT: "Cuint", ci.TypeKind.LONG: "Clong",
    ci.TypeKind.ULONG: "Culong", ci.TypeKind.LONGLONG: "Clonglong",
    ci.TypeKind.ULONGLONG: "Culonglong", ci.TypeKind.FLOAT: "Cfloat",
    ci.TypeKind.DOUBLE: "Cdouble",
}
JULIA_KEYWORDS = {
    "abstract", "baremodule", "begin", "break", "catch", "const", "continue", "do", "else",
    "elseif", "end", "export", "false", "finally", "for", "function", "global", "if", "import",
    "in", "isa", "let", "local", "macro", "module", "mutable", "outer", "primitive", "quote",
    "return", "struct", "true", "try", "type", "using", "where", "while",
}


def julia_name(name):
    return 'var"%s"' % name if name in JULIA_KEYWORDS else name


def parse(header):
    """The translation unit of `header`, with macros recorded and every comment attached."""
    include_dir = os.path.dirname(os.path.dirname(os.path.abspath(header)))
    options = (ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD
               | ci.TranslationUnit.PARSE_SKIP_FUNCTION_BODIES)
    tu = ci.Index.create().parse(header, args=["-x", "c", "-std=c99", "-I" + include_dir,
                                                "-fparse-all-comments"], options=options)
    errors = [d for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
    if errors:
        raise SystemExit("generate_libkeel: %s does not parse: %s" % (header, errors[0]))
    return tu


def in_abi(cursor, abi_dir):
    f = cursor.location.file
    return f is not None and os.path.dirname(os.path.abspath(f.name)) == abi_dir


def map_type(t):
    """The Julia spelling of C type `t`, as ccall and isbits structs need it."""
    if t.kind == ci.TypeKind.ELABORATED:
        t = t.get_named_type()
    if t.kind == ci.TypeKind.TYPEDEF:
        name = t.get_declaration().spelling
        if name in STD_TYPEDEFS:
            return STD_TYPEDEFS[name]
        if t.get_declaration().location.file is None or "/keel/" not in t.get_declaration().location.file.name:
            return map_type(t.get_canonical())
        return name
    if t.kind == ci.TypeKind.RECORD:
        return t.get_declaration().spelling
    if t.kind == ci.TypeKind.ENUM:
        return map_type(t.get_declaration().enum_type)
    if t.kind == ci.TypeKind.POINTER:
        pointee = t.get_pointee()
        canonical = pointee.get_canonical()
        if canonical.kind in (ci.TypeKind.FUNCTIONPROTO, ci.TypeKind.FUNCTIONNOPROTO):
            return "Ptr{Cvoid}"
        if canonical.kind in (ci.TypeKind.CHAR_S, ci.TypeKind.SCHAR):
            # const char*: a NUL-terminated string Julia converts from String; char*: a buffer.
            return "Cstring" if canonical.is_const_qualified() else "Ptr{UInt8}"
        return "Ptr{%s}" % map_type(pointee)
    if t.kind == ci.TypeKind.CONSTANTARRAY:
        return "NTuple{%d, %s}" % (t.element_count, map_type(t.element_type))
    if t.kind in BUILTINS:
        return BUILTINS[t.kind]
    raise SystemExit("generate_libkeel: no Julia mapping for C type %r (%s)" % (t.spelling, t.kind))


def comment_lines(cursor):
    """The header comment attached to `cursor`, as plain lines (no /* */)."""
    raw = cursor.raw_comment
    if not raw:
        return []
    text = raw.strip()
    if text.startswith("/*"):
        text = text[2:]
    if text.endswith("*/"):
        text = text[:-2]
    return [line.strip() for line in text.strip().splitlines()]


def docstring(cursor):
    lines = comment_lines(cursor)
    if not lines:
        return []
    body = [line.replace("\\", "\\\\").replace("$", "\\$").replace('"""', '\\"\\"\\"') for line in lines]
    return ['"""'] + body + ['"""']


def macro_value(cursor):
    """A constant's Julia literal, or None for guards, attributes and function-like macros."""
    tokens = [t.spelling for t in cursor.get_tokens()]
    if len(tokens) != 2:
        return None  # include guards have no value; KEEL_API, KEEL_HAS_SLOT have many tokens
    value = tokens[1]
    if value.startswith('"'):
        return value
    digits = value.rstrip("uUlL")
    try:
        int(digits, 0)
    except ValueError:
        return None
    return digits


def collect(tu, abi_dir):
    """Declarations of the ABI headers in translation order, as (kind, payload) items."""
    items, seen = [], set()
    for cursor in tu.cursor.get_children():
        if not in_abi(cursor, abi_dir):
            continue
        kind, name = cursor.kind, cursor.spelling
        if kind == ci.CursorKind.MACRO_DEFINITION:
            value = macro_value(cursor)
            if value is not None and name not in seen:
                seen.add(name)
                items.append(("macro", (name, value)))
        elif kind == ci.CursorKind.ENUM_DECL:
            items.append(("enum", [(c.spelling, c.enum_value, comment_lines(c)) for c in cursor.get_children()]))
        elif kind == ci.CursorKind.STRUCT_DECL and name:
            if cursor.is_definition():
                seen.add(name)
                items.append(("struct", cursor))
            elif name not in seen and cursor.get_definition() is None:
                seen.add(name)
                items.append(("opaque", name))
        elif kind == ci.CursorKind.TYPEDEF_DECL:
            underlying = cursor.underlying_typedef_type
            if underlying.kind == ci.TypeKind.ELABORATED and underlying.get_named_type().get_declaration().spelling == name:
                continue  # typedef struct x {...} x;
            items.append(("typedef", (name, map_type(underlying), comment_lines(cursor))))
        elif kind == ci.CursorKind.FUNCTION_DECL and is_exported(cursor) and name not in seen:
            seen.add(name)
            items.append(("function", cursor))
    return items


def is_exported(cursor):
    """KEEL_API functions carry visibility("default"); static inline helpers do not."""
    return any(child.kind == ci.CursorKind.VISIBILITY_ATTR for child in cursor.get_children())


def emit_struct(cursor):
    lines = docstring(cursor) + ["struct %s" % cursor.spelling]
    for field in cursor.type.get_fields():
        lines.append("    %s::%s" % (julia_name(field.spelling), map_type(field.type)))
    return lines + ["end"]


def emit_function(cursor):
    args = list(cursor.get_arguments())
    names = [julia_name(a.spelling or "arg%d" % i) for i, a in enumerate(args)]
    types = [map_type(a.type) for a in args]
    tuple_text = "(" + ", ".join(types) + ("," if len(types) == 1 else "") + ")"
    call = "ccall((:%s, libkeel), %s, %s%s)" % (cursor.spelling, map_type(cursor.result_type), tuple_text,
                                                "".join(", " + n for n in names))
    return docstring(cursor) + ["function %s(%s)" % (cursor.spelling, ", ".join(names)), "    " + call, "end"]


def render(header):
    abi_dir = os.path.dirname(os.path.abspath(header))
    items = collect(parse(header), abi_dir)
    out = [
        "# Generated by bindings/julia/generator/generate_libkeel.py from abi/keel/keel.h: do not edit.",
        "# Regenerate with: " + COMMAND,
        "# The raw layer: every constant, struct and embedding-API function of the Keel C ABI, one",
        "# for one; the idiomatic layer (Trainer, KeelError) is src/Keel.jl.",
        "module LibKeel",
        "",
        "# The core library: KEEL_LIB (a path) when set when this module is compiled, else the",
        "# dynamic loader's search for libkeel-core.so. Precompiled caches keep the value they saw.",
        'const libkeel = get(ENV, "KEEL_LIB", "libkeel-core")',
    ]
    for kind, payload in items:
        out.append("")
        if kind == "macro":
            out.append("const %s = %s" % payload)
        elif kind == "enum":
            # C gives enumeration constants the type int, whatever the enum's storage type.
            for name, value, comment in payload:
                out.append("const %s = Cint(%d)%s" % (name, value, "  # " + " ".join(comment) if comment else ""))
        elif kind == "typedef":
            name, jtype, comment = payload
            out.extend(["# " + line for line in comment] + ["const %s = %s" % (name, jtype)])
        elif kind == "opaque":
            out.append("mutable struct %s end" % payload)
        elif kind == "struct":
            out.extend(emit_struct(payload))
        elif kind == "function":
            out.extend(emit_function(payload))
    out += ["", "end # module LibKeel", ""]
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--header", default=DEFAULT_HEADER)
    parser.add_argument("--output", default=DEFAULT_OUTPUT)
    parser.add_argument("--check", action="store_true", help="fail if --output differs from what would be written")
    args = parser.parse_args()
    text = render(args.header)
    if args.check:
        current = open(args.output).read() if os.path.exists(args.output) else ""
        if current != text:
            sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), text.splitlines(True),
                                                       args.output, "regenerated"))
            print("%s is stale; regenerate with: %s" % (args.output, COMMAND))
            return 1
        print("%s is up to date" % args.output)
        return 0
    with open(args.output, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
