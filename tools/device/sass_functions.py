#!/usr/bin/env python3
"""Per-function machine-code summary of one kernel in one or two SASS listings.

Usage: sass_functions.py KERNEL_REGEX A.sass [B.sass]

Make the listings on the device machine, which has nvdisasm (this VM has no disassembler):
  nvdisasm -c A.cubin > A.sass
(build the cubins here as tools/device/cubin_functions.py says and carry them). KERNEL_REGEX picks
the kernel's text section by its mangled name, e.g. 'MixerKernelILi4ELb1' for the 4-row DeltaNet
mixer kernel. For each function in that section (the kernel body, then each out-of-line callee
such as RowDot, which every kernel holds its own copy of) this prints the instruction count and
the local-memory loads and stores (LDL/STL: spills and stack arrays); with two listings, side by
side, with the opcodes whose counts differ most. ptxas -v gives spill bytes per function but not
where they sit: a change in one phase can move spills into another phase's loop
(docs/perf/megakernel.md, session 37).
"""
import collections
import re
import subprocess
import sys

TOP_OPCODES = 12


def kernel_functions(path, kernel_regex):
    """{function label: [opcode, ...]} for the kernel section whose name matches kernel_regex."""
    functions = collections.OrderedDict()
    in_kernel, current = False, None
    section = re.compile(r"^\s*\.section\s+\.text\.(\S+?),")
    label = re.compile(r"^(\$?[A-Za-z_][\w$.]*):\s*$")
    instruction = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
    with open(path) as f:
        for line in f:
            m = section.match(line)
            if m:
                in_kernel = re.search(kernel_regex, m.group(1)) is not None
                current = None
                continue
            if not in_kernel:
                continue
            m = label.match(line)
            if m and not m.group(1).startswith(".L"):
                # Callees are labelled `$<kernel>$<callee>`; keep the callee's part.
                current = m.group(1).split("$")[-1] or m.group(1)
                functions.setdefault(current, [])
                continue
            m = instruction.match(line)
            if m and current is not None:
                functions[current].append(m.group(1))
    return functions


def short_names(labels, kernel_label):
    """Readable names: 'kernel body' for the kernel's own label, else the demangled function name
    without namespaces and arguments (c++filt, from binutils)."""
    demangled = subprocess.run(["c++filt"], input="\n".join(labels), capture_output=True,
                               text=True).stdout.split("\n")
    names = {}
    for mangled, plain in zip(labels, demangled):
        if mangled == kernel_label:
            names[mangled] = "kernel body"
            continue
        # "ns::RowSums<4> ns::RowDot<4>(int, ...)": the last word before the arguments, unqualified.
        last_word = plain.split("(")[0].split(" ")[-1]
        names[mangled] = re.sub(r"^(\w+::)+", "", last_word)
    return names


def local_ops(ops):
    return sum(op.startswith("LDL") for op in ops), sum(op.startswith("STL") for op in ops)


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    kernel_regex, listings = sys.argv[1], sys.argv[2:]
    tables = [kernel_functions(p, kernel_regex) for p in listings]
    if not tables[0]:
        sys.exit(f"no kernel section matching {kernel_regex!r} in {listings[0]}")
    names = list(tables[0]) + [n for t in tables[1:] for n in t if n not in tables[0]]
    readable = short_names(names, names[0])  # a section opens with its kernel's label
    for name in names:
        row = [f"{readable[name][:34]:34s}"]
        for t in tables:
            ops = t.get(name)
            if ops is None:
                row.append(f"{'absent':>28s}")
                continue
            ldl, stl = local_ops(ops)
            row.append(f"{len(ops):7d} instr {ldl:4d} LDL {stl:4d} STL")
        print("  ".join(row))
        if len(tables) == 2 and name in tables[0] and name in tables[1]:
            a, b = collections.Counter(tables[0][name]), collections.Counter(tables[1][name])
            diff = sorted(((op, a[op], b[op]) for op in set(a) | set(b) if a[op] != b[op]),
                          key=lambda x: -abs(x[1] - x[2]))
            if diff:
                print("    " + ", ".join(f"{op} {x}->{y}" for op, x, y in diff[:TOP_OPCODES]))


if __name__ == "__main__":
    main()
