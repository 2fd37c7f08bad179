"""The instruction mix of one gmlx kernel form for sm_90, from NVRTC's cubin and nvdisasm, on a
machine without a GPU: static counts (each instruction of the unrolled code once, both sides of
every branch), a check of how much work a kernel's inner loop does per weight before a lease.
The forms are nvrtc_check.py's; constants select one of them.

    /tmp/nvrtc/bin/pip install nvidia-cuda-nvdisasm     # beside nvrtc_check.py's packages
    /tmp/nvrtc/bin/python tools/bench/device/sass_count.py qmv4_norm_silu.cu K=4096 EARLY=1 B8=1
"""
import collections
import ctypes
import glob
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import nvrtc_check as n  # noqa: E402


def cubin(lib, include, source):
    prog = ctypes.c_void_p()
    lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"k.cu", 0, None, None)
    opts = [b"--gpu-architecture=sm_90", f"-I{include}".encode(), b"--std=c++17",
            b"--device-as-default-execution-space"]
    if lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts)) != 0:
        sys.exit("the form does not compile (run nvrtc_check.py for the log)")
    size = ctypes.c_size_t()
    lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetCUBIN(prog, buf)
    return buf.raw


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    disasm = glob.glob(os.path.join(sys.prefix, "lib/python3*/site-packages/nvidia/*/bin/nvdisasm"))
    if not disasm:
        sys.exit("no nvdisasm in this Python (pip install nvidia-cuda-nvdisasm)")
    forms = [f for f in n.FORMS if f[0] == sys.argv[1]]
    if not forms:
        sys.exit(f"no form of {sys.argv[1]} in nvrtc_check.py")
    body, header, inputs, outputs, params, instantiations = forms[0]
    want = dict(a.split("=", 1) for a in sys.argv[2:])
    names = params.split()
    chosen = [v for v in instantiations
              if all(str(dict(zip(names, v)).get(k)) == x for k, x in want.items())]
    if not chosen:
        sys.exit("no instantiation of that form has those constants")
    values = chosen[0]
    lib, include = n.nvrtc()
    path = "/tmp/gmlx-sass-count.cubin"
    with open(path, "wb") as f:
        f.write(cubin(lib, include, n.kernel_source(body, header, inputs, outputs, params, values)))
    sass = subprocess.run([disasm[0], "-c", path], capture_output=True, text=True, check=True).stdout
    ops = collections.Counter()
    for line in sass.splitlines():
        m = re.match(r"\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
        if m:
            ops[m.group(1)] += 1
    print(f"{body} {' '.join(f'{k}={v}' for k, v in zip(names, values))}")
    print(f"{sum(ops.values())} instructions: "
          + ", ".join(f"{k} {v}" for k, v in ops.most_common()))


if __name__ == "__main__":
    main()
