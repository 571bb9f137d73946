#!/usr/bin/env python3
"""Which functions' machine code differs between two builds of a kernel file, with no disassembler.

Usage: cubin_functions.py A.cubin [B.cubin]

Build a cubin with the flags the project uses, e.g. from build-cuda/megakernel:
  nvcc -O3 -DNDEBUG -arch=sm_90 -std=c++17 \
    --options-file CMakeFiles/tandem_megakernel.dir/includes_CUDA.rsp \
    -cubin ../../megakernel/kernels.cu -o A.cubin

Without relocatable device code every kernel's text section holds its own copy of each out-of-line
function it calls (RowDot, the attention partials), compiled against that kernel's callers: a change
elsewhere in a kernel can change the machine code of a function whose source did not change, and
that code then runs in every phase that calls it (docs/perf/megakernel.md, session 28). With one
cubin this prints, per kernel, each function's size and a hash of its bytes; with two, the pairs
that differ or exist in one build only. The bytes include call targets, so a function can differ
at the same size without a change in what it does; a change of size is a change of code. Needs
readelf and c++filt (binutils), nothing from CUDA.
"""
import hashlib
import re
import subprocess
import sys


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout
    return out.split("\n")[: len(names)]


def functions(path):
    """{(kernel, function): (size, md5)} for every function symbol in a kernel's text section."""
    data = open(path, "rb").read()
    sections = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True).stdout
    symbols = subprocess.run(["readelf", "-sW", path], capture_output=True, text=True).stdout
    text = {}  # section index -> (name, file offset)
    for line in sections.splitlines():
        m = re.match(r"\s*\[\s*(\d+)\]\s+(\.text\.\S+)\s+PROGBITS\s+[0-9a-f]+\s+([0-9a-f]+)", line)
        if m:
            text[int(m.group(1))] = (m.group(2)[len(".text."):], int(m.group(3), 16))
    raw = []
    for line in symbols.splitlines():
        fields = line.split()
        if len(fields) < 8 or fields[3] != "FUNC" or not fields[6].isdigit():
            continue
        index = int(fields[6])
        if index not in text:
            continue
        kernel, base = text[index]
        value, size = int(fields[1], 16), int(fields[2], 0)
        # A kernel's copy of a callee is named "$<kernel>$<callee>".
        name = fields[7].split("$")[-1] if fields[7].startswith("$") else fields[7]
        digest = hashlib.md5(data[base + value : base + value + size]).hexdigest()[:12]
        raw.append((kernel, name, size, digest))
    kernels = demangle([k for k, _, _, _ in raw])
    names = demangle([n for _, n, _, _ in raw])
    # Anonymous namespaces carry a hash of the file and build; compare them by name only.
    anon = re.compile(r"_GLOBAL__N__[0-9a-f_]+\w+_cu_[0-9a-f]+|\(anonymous namespace\)")
    out = {}
    for (_, _, size, digest), k, n in zip(raw, kernels, names):
        out[(anon.sub("anon", k)[:100], anon.sub("anon", n)[:100])] = (size, digest)
    return out


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    a = functions(sys.argv[1])
    if len(sys.argv) == 2:
        for (kernel, fn), (size, digest) in sorted(a.items()):
            print(f"{digest} {size:7d}  {kernel}  |  {fn}")
        return
    b = functions(sys.argv[2])
    same = 0
    for key in sorted(set(a) | set(b)):
        kernel, fn = key
        if key not in a or key not in b:
            print(f"only in {'B' if key not in a else 'A'}: {kernel}  |  {fn}")
        elif a[key] != b[key]:
            print(f"differs ({a[key][0]} -> {b[key][0]} bytes): {kernel}  |  {fn}")
        else:
            same += 1
    print(f"{same} identical")


if __name__ == "__main__":
    main()
