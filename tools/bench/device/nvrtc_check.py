"""Compiles gmlx's CUDA kernels for sm_90 with NVRTC on a machine without a GPU, in the template
forms a Llama-3-8B-shaped and a SmolLM2-135M-shaped bfloat16 decode launches, and prints each
one's registers per thread and spills (ptxas). A check before a GPU lease, not a test: MLX
wraps a kernel's body in a signature it generates and puts its own device header first
(`mlx/backend/cuda/device/utils.cuh`, compiled into libmlx, not shipped as a file); here a short
stand-in gives the same types (bfloat16, half, fixed-width integers, a Shape), so a kernel that
compiles here can still fail on one of MLX's own names, and the registers are NVRTC 12's.

    python3 -m venv /tmp/nvrtc && /tmp/nvrtc/bin/pip install nvidia-cuda-nvrtc-cu12 \
        nvidia-cuda-runtime-cu12
    /tmp/nvrtc/bin/python tools/bench/device/nvrtc_check.py [kernel name filter]

Exit status 1 when a kernel does not compile or spills.
"""
import ctypes
import glob
import os
import re
import sys

KERNELS = os.path.join(os.path.dirname(__file__), "../../../crates/gmlx-mlx/src/kernels")

PREAMBLE = """#include <cuda_fp16.h>
#include <cuda_bf16.h>
typedef unsigned int uint32_t;
typedef unsigned char uint8_t;
typedef signed char int8_t;
typedef int int32_t;
struct Shape {
  int d[8];
  __device__ int operator[](int i) const { return d[i]; }
};
"""

B, F = "__nv_bfloat16", "float"
# a warming launch's extra inputs (cuda_warm.rs) and constants: codes and bfloat16 scales, biases
WARM = [(f"n{i}", "uint32_t" if i % 3 == 0 else B) for i in range(9)]
WARM_PARAMS = "WB WL " + " ".join(f"N{i}B" for i in range(9))
BITS = {"EPS": 0x3727C5AC, "PSCALE": 0x3F800000, "SCALE": 0x3DB504F3}


def side(prefix):
    return [(f"w{prefix}", "uint32_t"), (f"s{prefix}", "S"), (f"b{prefix}", "S")]


# kernel file, header, inputs (name, type), outputs, template parameters, instantiations
FORMS = [
    ("qmv4_norm_rope_three.cu", "qmv4.cuh",
     [("nw", "W")] + side("0") + side("1") + side("2")
     + [("x", "T"), ("inv_freq", "float"), ("pos", "int32_t")],
     ["y0", "y1", "y2"],
     "T S W K N0 N1 N2 ROWS EPS BLOCK EARLY B8 SWZ Q8 D RD PSCALE",
     [[B, B, B, 4096, 4096, 1024, 1024, 2, "EPS", 256, e, b8, sw, 0, 128, 128, "PSCALE"]
      for e in (0, 1) for b8 in (0, 1) for sw in (0, 1)]
     + [[B, B, B, 4096, 4096, 1024, 1024, 2, "EPS", 128, e, 0, 0, 0, 128, 128, "PSCALE"]
        for e in (0, 1)]
     + [[B, B, B, 576, 576, 192, 192, 2, "EPS", 256, e, 0, sw, 0, 64, 64, "PSCALE"]
        for e in (0, 1) for sw in (0, 1)]
     + [[B, B, B, 4096, 4096, 1024, 1024, 2, "EPS", 256, e, b8, 0, 1, 128, 128, "PSCALE"]
        for e in (0, 1) for b8 in (0, 1)]
     + [[B, B, B, 576, 576, 192, 192, 2, "EPS", 256, 1, 0, 0, 1, 64, 64, "PSCALE"]]),
    ("qmv4_norm_three.cu", "qmv4.cuh",
     [("nw", "W")] + side("0") + side("1") + side("2") + [("x", "T")],
     ["y0", "y1", "y2"], "T S W K N0 N1 N2 ROWS EPS BLOCK EARLY B8 SWZ Q8",
     [[B, B, B, 4096, 4096, 1024, 1024, 2, "EPS", 256, e, 0, sw, 0] for e in (0, 1)
      for sw in (0, 1)]
     + [[F, F, F, 4096, 4096, 1024, 1024, 2, "EPS", 256, 1, 0, sw, 0] for sw in (0, 1)]
     + [[B, B, F, 4096, 4096, 1024, 1024, 2, "EPS", 256, 1, 0, 1, 0]]
     + [[B, B, B, 4096, 4096, 1024, 1024, 2, "EPS", 256, e, 0, 0, 1] for e in (0, 1)]),
    ("qmv4_norm_silu.cu", "qmv4.cuh",
     [("nw", "W")] + [("wg", "uint32_t"), ("sg", "S"), ("bg", "S"),
                      ("wu", "uint32_t"), ("su", "S"), ("bu", "S"), ("x", "T")],
     ["y"], "T S W K N ROWS EPS BLOCK EARLY B8 SWZ Q8",
     [[B, B, B, k, n, 1, "EPS", 256, e, b8, sw, 0] for k, n in ((4096, 14336), (576, 1536))
      for e in (0, 1) for b8 in (0, 1) for sw in (0, 1)]
     + [[B, B, B, k, n, 1, "EPS", 256, e, b8, 0, 1] for k, n in ((4096, 14336), (576, 1536))
        for e in (0, 1) for b8 in (0, 1)]
     + [[F, F, F, 4096, 14336, 1, "EPS", 256, 1, 0, 0, 0]]),
    ("qmv4_norm_silu_round.cu", "qmv4.cuh",
     [("nw", "W")] + [("wg", "uint32_t"), ("sg", "S"), ("bg", "S"),
                      ("wu", "uint32_t"), ("su", "S"), ("bu", "S"), ("x", "T")],
     [("xq", "uint32_t")], "T S W K N ROWS EPS BLOCK B8 NB",
     [[B, B, B, 4096, 14336, 32 // w, "EPS", 32 * w, b8, 256] for w in (8, 16, 32)
      for b8 in (0, 1)]
     + [[B, B, B, 4096, 14336, 32 // w, "EPS", 32 * w, 1, 512] for w in (16, 32)]
     + [[B, B, B, 576, 1536, 4, "EPS", 256, 0, 256]]),
    ("qmv4_add.cu", "qmv4.cuh",
     [("w", "uint32_t"), ("scales", "S"), ("biases", "S"), ("x", "T"), ("r", "T")],
     ["y"], "T S K N ROWS SPLIT B8 Q8 BLOCK",
     [[B, B, k, n, 2, sp, b8, 0, 128] for k, n in ((14336, 4096), (4096, 4096))
      for sp in (1, 2, 4) for b8 in (0, 1)]
     + [[B, B, 1536, 576, 2, sp, 0, 0, 128] for sp in (1, 4)]
     + [[B, B, k, n, 2, 1, b8, 1, 128] for k, n in ((14336, 4096), (4096, 4096))
        for b8 in (0, 1)]
     + [[B, B, 1536, 576, 2, 1, 0, 1, 128]]),
    ("qmv4.cu", "qmv4.cuh",
     [("w", "uint32_t"), ("scales", "S"), ("biases", "S"), ("x", "T")],
     ["y"], "T S K N ROWS SPLIT B8 Q8 BLOCK",
     [[B, B, 4096, 128256, 2, sp, b8, 0, 128] for sp in (1, 4) for b8 in (0, 1)]
     + [[F, F, 4096, 1024, 2, 1, 0, 0, 128]]
     + [[B, B, k, n, 2, 1, 1, 1, 128] for k, n in ((4096, 128256), (576, 49152))]),
    ("q8_round.cu", "qmv4.cuh", [("x", "T")], [("xq", "uint32_t")], "T K",
     [[B, 14336], [B, 1536]]),
    ("qmv4_add_rounded.cu", "qmv4.cuh",
     [("w", "uint32_t"), ("scales", "S"), ("biases", "S"), ("xq", "uint32_t"), ("r", "T")],
     ["y"], "T S K N ROWS SPLIT B8",
     [[B, B, k, n, 2, 1, b8] for k, n in ((14336, 4096), (1536, 576)) for b8 in (0, 1)]
     + [[B, B, 14336, 4096, 2, sp, b8] for sp in (2, 4, 8) for b8 in (0, 1)]),
    ("qmv4_rounded.cu", "qmv4.cuh",
     [("w", "uint32_t"), ("scales", "S"), ("biases", "S"), ("xq", "uint32_t")],
     ["y"], "T S K N ROWS SPLIT B8", [[B, B, 14336, 4096, 2, sp, 1] for sp in (1, 4)]),
    ("attend_decode.cu", "attend.cuh",
     [("q", "T"), ("k", "T"), ("v", "T"), ("kc", "T"), ("kc_shape", "Shape"), ("vc", "T"),
      ("pos", "int32_t"), ("counters", "uint32_t")],
     ["out", "part"], "T D G HKV PER BLOCK SCALE VE",
     [[B, 128, 4, 8, 8, 128, "SCALE", ve] for ve in (0, 1)]
     + [[B, 128, 4, 8, per, 128, "SCALE", 0] for per in (2, 4)]
     + [[B, 64, 3, 3, 8, 128, "SCALE", ve] for ve in (0, 1)]),
    ("warm_blocks.cu+attend_decode_warm.cu", "attend.cuh+warm.cuh",
     [("q", "T"), ("k", "T"), ("v", "T"), ("kc", "T"), ("kc_shape", "Shape"), ("vc", "T"),
      ("pos", "int32_t"), ("counters", "uint32_t")] + WARM,
     ["out", "part"], "T D G HKV PER BLOCK SCALE VE " + WARM_PARAMS,
     [[B, 128, 4, 8, 8, 128, "SCALE", 0, 132, last, 8388608, 1048576, b] + [0] * 6
      for b in (0, 1048576) for last in (0, 1)]),
    ("warm_blocks.cu+qmv4_add.cu", "qmv4.cuh+warm.cuh",
     [("w", "uint32_t"), ("scales", "S"), ("biases", "S"), ("x", "T"), ("r", "T")] + WARM,
     ["y"], "T S K N ROWS SPLIT B8 Q8 BLOCK " + WARM_PARAMS,
     [[B, B, 14336, 4096, 2, 1, b8, q8, 128, 132, 1] + [16777216, 2097152, 0] * 3
      for b8 in (0, 1) for q8 in (0, 1)]),
    ("layer_decode.cu", "qmv4.cuh+attend.cuh+layer.cuh",
     [("x", "T"), ("an", "W")] + side("q") + side("k") + side("v")
     + [("inv_freq", "float"), ("pos", "int32_t"), ("kc", "T"), ("kc_shape", "Shape"),
        ("vc", "T"), ("counters", "uint32_t")] + side("o") + [("fw", "W")] + side("g")
     + side("u") + side("d") + [("sync", "uint32_t")],
     ["y", "q", "k", "v", "att", "h", "act", "part"],
     "T S W K NQ NKV F D G HKV RD ROWS BLOCK EPS FEPS PSCALE SCALE PER B8A B8O B8U B8D GEN",
     [[B, B, B, 576, 576, 192, 1536, 64, 3, 3, 64, 2, 256, "EPS", "EPS", "PSCALE", "SCALE",
       8, b8, b8, b8, b8, 32] for b8 in (0, 1)]
     + [[F, F, F, 2048, 2048, 2048, 8192, 64, 1, 32, 64, 2, 256, "EPS", "EPS", "PSCALE",
         "SCALE", 8, 0, 0, 0, 0, 32]]),
    ("q6k_mv.cu", "q6k.cuh", [("w", "uint8_t"), ("x", "T")], ["y"], "T K N INFLIGHT",
     [[B, 4096, 128256, i] for i in (1, 2, 4)] + [[F, 14336, 4096, 4]]),
    ("q6k_dequantize.cu", "q6k.cuh", [("w", "uint8_t"), ("w_shape", "Shape")], ["y"], "T K",
     [[B, 4096], [F, 512]]),
]


def nvrtc():
    root = glob.glob(os.path.join(sys.prefix, "lib/python3*/site-packages/nvidia"))
    if not root:
        sys.exit("no nvidia-cuda-nvrtc-cu12 in this Python (see the module's text)")
    lib = ctypes.CDLL(os.path.join(root[0], "cuda_nvrtc/lib/libnvrtc.so.12"))
    return lib, os.path.join(root[0], "cuda_runtime/include")


def compile_one(lib, include, source):
    prog = ctypes.c_void_p()
    lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"k.cu", 0, None, None)
    opts = [b"--gpu-architecture=sm_90", f"-I{include}".encode(), b"--std=c++17",
            b"--ptxas-options=-v", b"--device-as-default-execution-space"]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    return rc, log.value.decode(errors="replace")


def ptx(lib, include, source):
    """NVRTC's PTX of `source` for compute_90 and its return code, normalized so that kernels
    that differ only in names compare equal: comments, the entry's and parameters' names and
    the mangled names of shared arrays (which carry the template values) dropped, registers
    renamed in order of first appearance."""
    prog = ctypes.c_void_p()
    lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"k.cu", 0, None, None)
    opts = [b"--gpu-architecture=compute_90", f"-I{include}".encode(), b"--std=c++17",
            b"--device-as-default-execution-space"]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetPTX(prog, buf)
    body = [l for l in buf.value.decode().splitlines()
            if not l.strip().startswith("//") and ".entry" not in l and "_param_" not in l]
    text = re.sub(r"_ZZ[A-Za-z0-9_]*", "SHARED", "\n".join(body))
    seen = {}
    return rc, re.sub(r"%[a-z]+[0-9]+",
                      lambda m: seen.setdefault(m.group(0), f"%r{len(seen)}"), text)


def kernel_source(body_file, header, inputs, outputs, params, values):
    names = params.split()
    types = {"T", "S", "W"}
    template = ", ".join(("typename " if n in types else "int ") + n for n in names)
    args = []
    for name, ty in inputs:
        args.append(f"const __grid_constant__ Shape {name}" if ty == "Shape"
                    else f"const {ty}* {name}")
    # an output is named (of type T) or (name, type)
    args += [f"{o[1]}* {o[0]}" if isinstance(o, tuple) else f"float* {o}" if o == "part"
             else f"T* {o}" for o in outputs]
    body = "".join(open(os.path.join(KERNELS, b)).read() for b in body_file.split("+"))
    head = "".join(open(os.path.join(KERNELS, h)).read() for h in header.split("+"))
    literal = [str(BITS.get(v, v)) for v in values]
    inst = ", ".join(literal)
    concrete = dict(zip(names, literal))
    sig = ", ".join(re.sub(r"\b([TSW])\b", lambda m: concrete.get(m.group(1), m.group(1)), a)
                    for a in args)
    return (f"{PREAMBLE}{head}\ntemplate <{template}>\n__global__ void gmlx_kernel("
            f"{', '.join(args)}) {{\n{body}\n}}\n"
            f"template __global__ void gmlx_kernel<{inst}>({sig});\n")


def main():
    lib, include = nvrtc()
    only = sys.argv[1] if len(sys.argv) > 1 else ""
    failed = False
    for body, header, inputs, outputs, params, forms in FORMS:
        if only not in body:
            continue
        for values in forms:
            rc, log = compile_one(lib, include,
                                  kernel_source(body, header, inputs, outputs, params, values))
            regs = re.findall(r"Used (\d+) registers", log)
            spills = re.findall(r"(\d+) bytes spill stores", log)
            stack = re.findall(r"(\d+) bytes stack frame", log)
            bad = rc != 0 or any(int(s) for s in spills)
            failed |= bad
            label = " ".join(f"{n}={v}" for n, v in zip(params.split(), values))
            print(f"{'FAIL' if bad else 'ok  '} {body:26} {label}: registers {','.join(regs)}"
                  f" spill bytes {','.join(spills)} stack bytes {','.join(stack)}")
            if rc != 0:
                print("\n".join(l for l in log.splitlines() if "error" in l)[:2000])
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
