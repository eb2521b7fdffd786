#!/usr/bin/env python3
"""Link-time stand-ins for a CUDA LibTorch whose .so files live on another machine.

A pip torch's lib/ is about 1 GB; to build `--config=cuda` binaries here and run
them on a GPU machine that has that torch, only its headers and the list of
symbols each library exports need to come here. On the GPU machine:

    for l in libtorch.so libtorch_cpu.so libtorch_cuda.so libc10.so libc10_cuda.so; do
      nm -D --defined-only -S $TORCH/lib/$l > syms/$l.syms; done

Here: `tools/libtorch_stubs.py syms/ LIBTORCH_HOME/lib`, with the headers in
LIBTORCH_HOME/include. Each stub has the real library's SONAME and exports
the same names: functions as a bare `ret`, objects with their real size (so
copy relocations are sized right). Binaries linked against the stubs load the
real libraries at run time (LD_LIBRARY_PATH=$TORCH/lib there). Never run
anything against the stubs themselves. docs/operations.md, "GPU builds".
"""

import os
import subprocess
import sys


def stub_assembly(symbols_file):
    lines = []
    for line in open(symbols_file):
        fields = line.split()
        if len(fields) == 4:
            _, size, kind, name = fields
        elif len(fields) == 3:
            _, kind, name = fields
            size = "1"
        else:
            continue
        name = name.split("@")[0]
        binding = ".weak" if kind in "WVv" else ".globl"
        if kind in "TtWi":
            lines.append(f'.text\n{binding} "{name}"\n.type "{name}",@function\n"{name}":\nret\n')
        elif kind in "DdBbRrVvuG":
            n = max(1, int(size, 16))
            lines.append(f'.data\n{binding} "{name}"\n.type "{name}",@object\n'
                         f'.size "{name}",{n}\n.balign 16\n"{name}":\n.zero {n}\n')
    return "".join(lines), len(lines)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: libtorch_stubs.py SYMBOLS_DIR OUTPUT_LIB_DIR")
    symbols_dir, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    for entry in sorted(os.listdir(symbols_dir)):
        if not entry.endswith(".syms"):
            continue
        library = entry[: -len(".syms")]
        assembly, count = stub_assembly(os.path.join(symbols_dir, entry))
        source = os.path.join(out_dir, library + ".stub.s")
        with open(source, "w") as f:
            f.write(assembly)
        subprocess.check_call(["gcc", "-shared", "-nostdlib", "-o", os.path.join(out_dir, library),
                               f"-Wl,-soname,{library}", source])
        os.remove(source)
        print(f"{library}: {count} symbols")


if __name__ == "__main__":
    main()
