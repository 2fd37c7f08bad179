# One-off check (twelfth session): the norm_silu kernel with LOOP=1 (every launch unless
# GMLX_CUDA_QMV_SILU_LOOP is set) compiles to the same PTX as at d6a55fd (GPU-tested), once the
# mangled name of its shared row (which carries the new constant) is normalized. Run from
# tools/bench/device with the NVRTC venv after
#   for f in qmv4.cuh qmv4_norm_silu.cu; do git show d6a55fd:crates/gmlx-mlx/src/kernels/$f > /tmp/oldk/$f; done
import ctypes, sys, re
sys.path.insert(0, ".")
import nvrtc_check as n
lib, inc = n.nvrtc()
B = "__nv_bfloat16"
def ptx(src):
    prog = ctypes.c_void_p()
    lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"k.cu", 0, None, None)
    opts = [b"--gpu-architecture=compute_90", f"-I{inc}".encode(), b"--std=c++17", b"--device-as-default-execution-space"]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t(); lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value); lib.nvrtcGetPTX(prog, buf)
    body = [l for l in buf.value.decode().splitlines() if not l.strip().startswith("//") and ".entry" not in l and "_param_" not in l]
    return rc, re.sub(r"_ZZ11gmlx_kernel\S*?E2xn", "XN", "\n".join(body))
ins = [("nw","W"),("wg","uint32_t"),("sg","S"),("bg","S"),("wu","uint32_t"),("su","S"),("bu","S"),("x","T")]
same = True
for k, nn in ((4096, 14336), (576, 1536)):
    for e in (0, 1):
        for b8 in (0, 1):
            n.KERNELS = "/tmp/oldk"
            old = ptx(n.kernel_source("qmv4_norm_silu.cu", "qmv4.cuh", ins, ["y"], "T S W K N ROWS EPS BLOCK EARLY B8", [B,B,B,k,nn,1,"EPS",256,e,b8]))
            n.KERNELS = "../../../crates/gmlx-mlx/src/kernels"
            new = ptx(n.kernel_source("qmv4_norm_silu.cu", "qmv4.cuh", ins, ["y"], "T S W K N ROWS EPS BLOCK EARLY LOOP B8", [B,B,B,k,nn,1,"EPS",256,e,1,b8]))
            eq = old == new
            same &= eq
            print(f"K={k} N={nn} EARLY={e} B8={b8} LOOP=1: rc {old[0]}/{new[0]}, PTX {'identical' if eq else 'DIFFERS'}")
sys.exit(0 if same else 1)
