#!/usr/bin/env python3
"""Registers and spills of every layer kernel and its out-of-line callees, on this VM (no GPU).

Usage (from the repository root, after build-cuda/ is configured, e.g. by pack_variant.sh):
  python3 tools/device/ptxas_spills.py [-DNAME=VALUE ...]

Compiles megakernel/kernels.cu for sm_90 with the build's own nvcc and include flags plus
`-Xptxas -v` (about a minute; extra arguments go to nvcc, e.g. a macro that picks a variant) and
prints, per kernel, its registers, stack frame and spill bytes, then the same for each out-of-line
callee (RowDot, the attention team paths, ...). Each kernel holds its own copy of every callee,
and ptxas allocates a callee's registers with its caller in view: an edit to one phase can move
spills into another kernel's copy of a function it did not touch (docs/perf/megakernel.md,
sessions 25 and 41). A spill in a function's prologue (callee-saved registers) costs once a call,
one in its loop once a step; this tells neither apart: sass_functions.py on the device does.
"""
import glob
import re
import subprocess
import sys
import tempfile

ENTRY = re.compile(r"Compiling entry function '([^']+)'")
PROPS = re.compile(r"Function properties for (\S+)")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers")


def short(names):
    """Demangled names without namespaces and parameter lists: MixerKernel<1, false>."""
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    result = {}
    for mangled, name in zip(names, out):
        name = re.sub(r"\w+::|\(anonymous namespace\)::", "", name)
        depth, end = 0, len(name)
        for i, ch in enumerate(name):  # cut at the parameter list: the first '(' outside <>
            depth += ch == "<"
            depth -= ch == ">"
            if ch == "(" and depth == 0:
                end = i
                break
        result[mangled] = re.sub(r"^\w+(<[^<>]*>)?\s+", "", name[:end])  # the return type
    return result


def nvcc_path():
    for f in glob.glob("build-cuda/CMakeFiles/*/CMakeCUDACompiler.cmake"):
        m = re.search(r'set\(CMAKE_CUDA_COMPILER "([^"]+)"\)', open(f).read())
        if m:
            return m.group(1)
    sys.exit("ptxas_spills: build-cuda/ is not configured (run tools/device/pack_variant.sh once)")


def main():
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cmd = [nvcc_path(), "--options-file", "CMakeFiles/tandem_megakernel.dir/includes_CUDA.rsp",
               "-O3", "-DNDEBUG", "-arch=sm_90", "-std=c++17", "-cubin", "../../megakernel/kernels.cu",
               "-Xptxas", "-v", "-o", cubin.name] + sys.argv[1:]
        run = subprocess.run(cmd, cwd="build-cuda/megakernel", capture_output=True, text=True)
    if run.returncode != 0:
        sys.stderr.write(run.stderr[-4000:])
        sys.exit(run.returncode)
    entry, current = None, None
    rows = []  # (kernel, function or "", registers or "", frame, stores, loads)
    for line in run.stderr.splitlines():
        if m := ENTRY.search(line):
            entry = m.group(1)
        elif m := PROPS.search(line):
            current = m.group(1)
        elif (m := FRAME.search(line)) and entry is not None:
            rows.append([entry, "" if current == entry else current, ""] + list(m.groups()))
        elif (m := USED.search(line)) and rows and rows[-1][1] == "":
            rows[-1][2] = m.group(1)
    names = short(sorted({r[0] for r in rows} | {r[1] for r in rows if r[1]}))
    print(f"{'kernel / callee':<56} {'regs':>5} {'frame':>6} {'spill st':>9} {'spill ld':>9}")
    for kernel, callee, regs, frame, stores, loads in rows:
        name = names[kernel] if not callee else "    " + names[callee]
        print(f"{name[:56]:<56} {regs:>5} {frame:>6} {stores:>9} {loads:>9}")


if __name__ == "__main__":
    main()
