"""Checks the committed LibKeel.jl against the C headers, with two oracles besides the generator.

Why: no Julia runs on these machines, so the Julia structs cannot be checked by Julia itself.
Instead the test reads the generated Julia text, lays each struct out from its Julia field
types with C's alignment rules (what Julia does for isbits structs), and compares every field
offset and struct size with what clang reports and with what a compiled C program's offsetof
prints. Function signatures are compared with the header and with a hand-written table of
the embedding API. Run: /usr/bin/python3 -m pytest bindings/julia/generator
"""
import os
import re
import subprocess
import tempfile

import clang.cindex as ci
import pytest

import generate_libkeel as gen

ABI_DIR = os.path.join(gen.REPO, "abi", "keel")
POINTER_BYTES = 8
# (size, alignment) of Julia's C-compatible scalar types on x86-64 and aarch64 Linux.
SCALARS = {
    "Int8": (1, 1), "UInt8": (1, 1), "Cchar": (1, 1), "Cuchar": (1, 1), "Bool": (1, 1),
    "Int16": (2, 2), "UInt16": (2, 2), "Cshort": (2, 2), "Cushort": (2, 2),
    "Int32": (4, 4), "UInt32": (4, 4), "Cint": (4, 4), "Cuint": (4, 4), "Cfloat": (4, 4),
    "Int64": (8, 8), "UInt64": (8, 8), "Clong": (8, 8), "Culong": (8, 8), "Clonglong": (8, 8),
    "Culonglong": (8, 8), "Csize_t": (8, 8), "Cdouble": (8, 8), "Int": (8, 8), "UInt": (8, 8),
    "Cstring": (POINTER_BYTES, POINTER_BYTES),
}
# The embedding API as the issue specifies it, written by hand: (return, argument types).
EMBED_SIGNATURES = {
    "keel_last_error": ("Cstring", []),
    "keel_register_plugin_library": ("keel_status", ["Cstring"]),
    "keel_trainer_create_from_file": ("keel_status", ["Cstring", "Ptr{Ptr{keel_trainer}}"]),
    "keel_trainer_create_from_json": ("keel_status", ["Cstring", "Ptr{Ptr{keel_trainer}}"]),
    "keel_trainer_destroy": ("Cvoid", ["Ptr{keel_trainer}"]),
    "keel_trainer_step": ("keel_status", ["Ptr{keel_trainer}", "Ptr{keel_step_metrics}"]),
    "keel_trainer_evaluate": ("keel_status", ["Ptr{keel_trainer}", "Ptr{Cfloat}"]),
    "keel_trainer_train": ("keel_status", ["Ptr{keel_trainer}", "Int64", "keel_step_callback", "Ptr{Cvoid}"]),
    "keel_trainer_last_metrics": ("keel_status", ["Ptr{keel_trainer}", "Ptr{keel_step_metrics}"]),
    "keel_trainer_save": ("keel_status", ["Ptr{keel_trainer}", "Cstring", "Int32"]),
    "keel_trainer_load": ("keel_status", ["Ptr{keel_trainer}", "Cstring"]),
    "keel_trainer_param_count": ("keel_status", ["Ptr{keel_trainer}", "Ptr{Csize_t}"]),
    "keel_trainer_param_info": ("keel_status", ["Ptr{keel_trainer}", "Csize_t", "Ptr{keel_param_info}"]),
    "keel_trainer_param_tensor": ("keel_status", ["Ptr{keel_trainer}", "Cstring", "Ptr{keel_tensor}"]),
    "keel_trainer_read_param": ("keel_status", ["Ptr{keel_trainer}", "Cstring", "Ptr{Cfloat}", "Csize_t"]),
    "keel_trainer_write_param": ("keel_status", ["Ptr{keel_trainer}", "Cstring", "Ptr{Cfloat}", "Csize_t"]),
    "keel_plugin_count": ("keel_status", ["Ptr{Csize_t}"]),
    "keel_plugin_describe": ("keel_status", ["Csize_t", "Ptr{keel_plugin_description}"]),
    "keel_register_plugin": ("keel_status", ["Ptr{keel_plugin_info}"]),
    # appended in 0.5
    "keel_register_plugin_replace": ("keel_status", ["Ptr{keel_plugin_info}"]),
    "keel_trainer_vocab_size": ("keel_status", ["Ptr{keel_trainer}", "Ptr{Int32}"]),
    "keel_trainer_context_length": ("keel_status", ["Ptr{keel_trainer}", "Ptr{Int32}"]),
    "keel_trainer_logits": ("keel_status", ["Ptr{keel_trainer}", "Ptr{Int32}", "Int32", "Int32", "Ptr{Cfloat}", "Csize_t"]),
    "keel_trainer_generate": ("keel_status", ["Ptr{keel_trainer}", "Ptr{Int32}", "Csize_t", "Int32", "Cdouble", "UInt64",
                                              "Ptr{Int32}"]),
    # appended in 0.14
    "keel_trainer_forward_backward": ("keel_status", ["Ptr{keel_trainer}", "Ptr{Int32}", "Ptr{Int32}", "Int32", "Int32",
                                                      "Ptr{Cfloat}"]),
    "keel_trainer_read_grad": ("keel_status", ["Ptr{keel_trainer}", "Cstring", "Ptr{Cfloat}", "Csize_t"]),
    "keel_trainer_optimizer_step": ("keel_status", ["Ptr{keel_trainer}", "Ptr{keel_step_metrics}"]),
    "keel_trainer_step_on": ("keel_status", ["Ptr{keel_trainer}", "Ptr{Int32}", "Ptr{Int32}", "Int32", "Int32",
                                             "Ptr{keel_step_metrics}"]),
    "keel_trainer_set_verbose": ("keel_status", ["Ptr{keel_trainer}", "Int32"]),
    "keel_trainer_export_hf_tokenizer": ("keel_status", ["Ptr{keel_trainer}", "Cstring", "Cstring"]),
    "keel_trainer_forward_backward_packed": ("keel_status", ["Ptr{keel_trainer}", "Ptr{Int32}", "Ptr{Int32}",
                                                             "Ptr{Int32}", "Int32", "Int32", "Ptr{Cfloat}"]),
    "keel_trainer_step_on_packed": ("keel_status", ["Ptr{keel_trainer}", "Ptr{Int32}", "Ptr{Int32}", "Ptr{Int32}",
                                                    "Int32", "Int32", "Ptr{keel_step_metrics}"]),
    "keel_set_log_level": ("keel_status", ["Int32"]),
    # appended in 0.15
    "keel_trainer_export_hf": ("keel_status", ["Ptr{keel_trainer}", "Cstring"]),
    "keel_trainer_load_hf": ("keel_status", ["Ptr{keel_trainer}", "Cstring"]),
    "keel_trainer_generate_top": ("keel_status", ["Ptr{keel_trainer}", "Ptr{Int32}", "Csize_t", "Int32", "Cdouble", "Int32",
                                                  "Cdouble", "UInt64", "Ptr{Int32}"]),
    # appended in 0.17
    "keel_trainer_gather_param": ("keel_status", ["Ptr{keel_trainer}", "Cstring", "Ptr{Cfloat}", "Csize_t", "Ptr{Int64}",
                                                  "Ptr{Int32}"]),
    # appended in 0.18
    "keel_trainer_set_kv_cache": ("keel_status", ["Ptr{keel_trainer}", "Int32"]),
    # appended in 0.19
    "keel_trainer_generate_each": ("keel_status", ["Ptr{keel_trainer}", "Ptr{Int32}", "Csize_t", "Int64", "Cdouble",
                                                   "Int32", "Cdouble", "UInt64", "keel_token_callback", "Ptr{Cvoid}",
                                                   "Ptr{Int64}"]),
    "keel_tokenizer_open": ("keel_status", ["Cstring", "Ptr{Ptr{keel_tokenizer}}"]),
    "keel_tokenizer_destroy": ("Cvoid", ["Ptr{keel_tokenizer}"]),
    "keel_tokenizer_vocab_size": ("keel_status", ["Ptr{keel_tokenizer}", "Ptr{Int64}"]),
    "keel_tokenizer_encode": ("keel_status", ["Ptr{keel_tokenizer}", "Cstring", "Csize_t", "Ptr{Ptr{Int32}}",
                                              "Ptr{Csize_t}"]),
    "keel_tokenizer_decode": ("keel_status", ["Ptr{keel_tokenizer}", "Ptr{Int32}", "Csize_t", "Int32", "Ptr{Cstring}",
                                              "Ptr{Csize_t}"]),
    "keel_tokenizer_token_id": ("keel_status", ["Ptr{keel_tokenizer}", "Cstring", "Ptr{Int32}"]),
    "keel_tokenizer_token": ("keel_status", ["Ptr{keel_tokenizer}", "Int32", "Ptr{Cstring}", "Ptr{Int32}"]),
}


@pytest.fixture(scope="module")
def julia_text():
    with open(gen.DEFAULT_OUTPUT) as f:
        return f.read()


@pytest.fixture(scope="module")
def julia(julia_text):
    """Structs, type aliases and ccall signatures read back from the generated Julia."""
    structs = {m.group(1): re.findall(r"^    (\w+)::(.+)$", m.group(2), re.M)
               for m in re.finditer(r"^struct (\w+)\n(.*?)^end$", julia_text, re.M | re.S)}
    aliases = dict(re.findall(r"^const (\w+) = ([A-Z]\w*(?:\{.*\})?)$", julia_text, re.M))
    functions = {}
    for m in re.finditer(r"^function (\w+)\((.*)\)\n    ccall\(\(:(\w+), libkeel\), (.+?), \((.*?)\)(.*)\)$",
                         julia_text, re.M):
        assert m.group(1) == m.group(3), "function %s calls %s" % (m.group(1), m.group(3))
        functions[m.group(1)] = (m.group(4), split_types(m.group(5)))
    return {"structs": structs, "aliases": aliases, "functions": functions}


@pytest.fixture(scope="module")
def header():
    tu = gen.parse(gen.DEFAULT_HEADER)
    cursors = [c for c in tu.cursor.get_children() if gen.in_abi(c, ABI_DIR)]
    structs = {c.spelling: c for c in cursors if c.kind == ci.CursorKind.STRUCT_DECL and c.is_definition()}
    functions = {c.spelling: c for c in cursors if c.kind == ci.CursorKind.FUNCTION_DECL and gen.is_exported(c)}
    return {"structs": structs, "functions": functions}


def split_types(text):
    """'A, Ptr{B}, NTuple{4, C},' -> ['A', 'Ptr{B}', 'NTuple{4, C}'] (commas inside braces kept)."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def size_align(jtype, julia):
    """C's size and alignment of a Julia field type, from the Julia text alone."""
    if jtype.startswith("Ptr{"):
        return POINTER_BYTES, POINTER_BYTES
    m = re.fullmatch(r"NTuple\{(\d+), (.+)\}", jtype)
    if m:
        size, align = size_align(m.group(2), julia)
        return int(m.group(1)) * size, align
    if jtype in SCALARS:
        return SCALARS[jtype]
    if jtype in julia["aliases"]:
        return size_align(julia["aliases"][jtype], julia)
    offsets, size, align = layout(jtype, julia)
    return size, align


def layout(struct_name, julia):
    """Field offsets, size and alignment of a Julia struct laid out by C's rules."""
    offsets, offset, struct_align = [], 0, 1
    for _, jtype in julia["structs"][struct_name]:
        size, align = size_align(jtype, julia)
        offset = (offset + align - 1) // align * align
        offsets.append(offset)
        offset += size
        struct_align = max(struct_align, align)
    return offsets, (offset + struct_align - 1) // struct_align * struct_align, struct_align


def compiled_offsets(structs):
    """{struct: ([field offsets], sizeof)} printed by a C program built with the system compiler."""
    lines = ['#include <stdio.h>', '#include "keel/keel.h"', "int main(void) {"]
    for name, fields in sorted(structs.items()):
        for field, _ in fields:
            lines.append('  printf("%s %s %%zu\\n", offsetof(%s, %s));' % (name, field, name, field))
        lines.append('  printf("%s sizeof %%zu\\n", sizeof(%s));' % (name, name))
    lines.append("  return 0;\n}\n")
    with tempfile.TemporaryDirectory() as tmp:
        source, program = os.path.join(tmp, "offsets.c"), os.path.join(tmp, "offsets")
        with open(source, "w") as f:
            f.write("\n".join(lines))
        subprocess.run(["cc", "-std=c99", "-I" + os.path.dirname(ABI_DIR), source, "-o", program], check=True)
        output = subprocess.run([program], check=True, capture_output=True, text=True).stdout
    result = {}
    for line in output.splitlines():
        name, field, value = line.split()
        entry = result.setdefault(name, ([], None))
        if field == "sizeof":
            result[name] = (entry[0], int(value))
        else:
            entry[0].append(int(value))
    return result


def test_generated_file_is_fresh(julia_text):
    assert gen.render(gen.DEFAULT_HEADER) == julia_text, "regenerate with: " + gen.COMMAND


def test_header_comment_names_generator_and_command(julia_text):
    assert "generate_libkeel.py" in julia_text.splitlines()[0]
    assert gen.COMMAND in julia_text.splitlines()[1]


def test_every_struct_appears_with_its_fields_in_order(julia, header):
    assert set(header["structs"]) == set(julia["structs"])
    for name, cursor in header["structs"].items():
        assert [f.spelling for f in cursor.type.get_fields()] == [f for f, _ in julia["structs"][name]], name


def test_every_embed_function_appears(julia, header):
    embed = {n for n, c in header["functions"].items() if c.location.file.name.endswith("embed.h")}
    assert embed == set(EMBED_SIGNATURES), "embed.h and this test's table disagree: update the table"
    assert set(header["functions"]) == set(julia["functions"])


def test_embed_signatures_match_the_hand_written_table(julia):
    for name, expected in EMBED_SIGNATURES.items():
        assert julia["functions"][name] == expected, name


def test_argument_types_have_the_c_sizes(julia, header):
    for name, cursor in header["functions"].items():
        _, arg_types = julia["functions"][name]
        c_args = list(cursor.get_arguments())
        assert len(arg_types) == len(c_args), name
        for jtype, arg in zip(arg_types, c_args):
            assert size_align(jtype, julia)[0] == arg.type.get_size(), (name, arg.spelling, jtype)
            is_pointer = arg.type.get_canonical().kind == ci.TypeKind.POINTER
            assert is_pointer == (jtype.startswith("Ptr{") or jtype == "Cstring" or
                                  julia["aliases"].get(jtype, "").startswith("Ptr{")), (name, arg.spelling)


def test_struct_layouts_match_clang(julia, header):
    for name, cursor in header["structs"].items():
        offsets, size, _ = layout(name, julia)
        clang_offsets = [cursor.type.get_offset(f.spelling) // 8 for f in cursor.type.get_fields()]
        assert offsets == clang_offsets, name
        assert size == cursor.type.get_size(), name


def test_struct_layouts_match_compiled_c(julia):
    compiled = compiled_offsets(julia["structs"])
    for name in julia["structs"]:
        offsets, size, _ = layout(name, julia)
        assert (offsets, size) == compiled[name], name


def test_constants_that_matter(julia_text):
    for constant in ["KEEL_ABI_VERSION_MAJOR", "KEEL_ABI_VERSION_MINOR", "KEEL_MAX_DIMS", "KEEL_OK",
                     "KEEL_ERR_INVALID_CONFIG", "KEEL_KIND_DATA", "KEEL_DEVICE_CPU", "KEEL_DTYPE_FLOAT"]:
        assert re.search(r"^const %s = " % constant, julia_text, re.M), constant
    assert re.search(r"^const KEEL_ERR_NONFINITE = Cint\(9\)", julia_text, re.M)


def test_output_is_deterministic():
    assert gen.render(gen.DEFAULT_HEADER) == gen.render(gen.DEFAULT_HEADER)


@pytest.mark.skipif("KEEL_LIB" not in os.environ, reason="KEEL_LIB (a built libkeel-core.so) is not set")
def test_every_ccall_symbol_is_exported_by_the_core(julia):
    import ctypes
    library = ctypes.CDLL(os.environ["KEEL_LIB"])
    missing = [name for name in julia["functions"] if not hasattr(library, name)]
    assert not missing, "libkeel-core does not export: %s" % missing
