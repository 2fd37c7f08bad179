# One-off check (eleventh session): the default forms of the 4-bit kernels compile to the same PTX
# as at 6f51775 (whose kernels passed their GPU test), up to a consistent renaming of registers.
# Run from tools/bench/device with the NVRTC venv, after
#   for f in qmv4.cuh qmv4.cu qmv4_add.cu qmv4_norm_three.cu qmv4_norm_rope_three.cu qmv4_norm_silu.cu; do
#     git show 6f51775:crates/gmlx-mlx/src/kernels/$f > /tmp/oldk/$f; done
import ctypes, sys, re
sys.path.insert(0, ".")
import nvrtc_check as n
lib, inc = n.nvrtc()
B="__nv_bfloat16"
def ptx(src):
    prog = ctypes.c_void_p()
    lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"k.cu", 0, None, None)
    opts = [b"--gpu-architecture=compute_90", f"-I{inc}".encode(), b"--std=c++17", b"--device-as-default-execution-space"]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t(); lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value); lib.nvrtcGetPTX(prog, buf)
    text = buf.value.decode()
    # drop names and comments that differ by template parameter lists
    body = [l for l in text.splitlines() if not l.strip().startswith("//") and ".entry" not in l and "_param_" not in l]
    return rc, "\n".join(body)
def side(p): return [(f"w{p}","uint32_t"),(f"s{p}","S"),(f"b{p}","S")]
cases = [
 ("qmv4_norm_rope_three.cu", [("nw","W")]+side("0")+side("1")+side("2")+[("x","T"),("inv_freq","float"),("pos","int32_t")], ["y0","y1","y2"],
  "T S W K N0 N1 N2 ROWS EPS BLOCK PREFETCH D RD PSCALE", [B,B,B,4096,4096,1024,1024,2,"EPS",256,0,128,128,"PSCALE"],
  "T S W K N0 N1 N2 ROWS EPS BLOCK EARLY B8 D RD PSCALE"),
 ("qmv4_norm_silu.cu", [("nw","W"),("wg","uint32_t"),("sg","S"),("bg","S"),("wu","uint32_t"),("su","S"),("bu","S"),("x","T")], ["y"],
  "T S W K N ROWS EPS BLOCK PREFETCH", [B,B,B,4096,14336,1,"EPS",256,0], "T S W K N ROWS EPS BLOCK EARLY B8"),
 ("qmv4_norm_three.cu", [("nw","W")]+side("0")+side("1")+side("2")+[("x","T")], ["y0","y1","y2"],
  "T S W K N0 N1 N2 ROWS EPS BLOCK PREFETCH", [B,B,B,4096,4096,1024,1024,2,"EPS",256,0], "T S W K N0 N1 N2 ROWS EPS BLOCK EARLY B8"),
 ("qmv4_add.cu", [("w","uint32_t"),("scales","S"),("biases","S"),("x","T"),("r","T")], ["y"], "T S K N ROWS", [B,B,14336,4096,2], "T S K N ROWS SPLIT B8"),
 ("qmv4.cu", [("w","uint32_t"),("scales","S"),("biases","S"),("x","T")], ["y"], "T S K N ROWS", [B,B,4096,128256,2], "T S K N ROWS SPLIT B8"),
]
for body, inputs, outputs, oldp, oldv, newp in cases:
    n.KERNELS = "/tmp/oldk"
    a = ptx(n.kernel_source(body, "qmv4.cuh", inputs, outputs, oldp, oldv))
    n.KERNELS = "/work/main/crates/gmlx-mlx/src/kernels"
    # the new constants at their defaults: SPLIT=1 after the old ones, B8=0 after EARLY or SPLIT
    if "SPLIT" in newp:
        newv = oldv + [1, 0]
    else:
        at = newp.split().index("B8")
        newv = oldv[:at] + [0] + oldv[at:]
    b = ptx(n.kernel_source(body, "qmv4.cuh", inputs, outputs, newp, newv))
    import difflib
    def norm(t):
        # the test harness's kernel template carries the constants in its mangled name
        t = re.sub(r"_ZZ11gmlx_kernelI\S*?E(\d+)(\w+?)\b", r"LOCAL_\2", t)
        seen = {}
        return re.sub(r"%(f|r|rd|rs|p)\d+", lambda m: seen.setdefault(m.group(0), f"%{m.group(1)}#{len(seen)}"), t)
    d = [l for l in difflib.unified_diff(norm(a[1]).splitlines(), norm(b[1]).splitlines(), lineterm="", n=0) if l[:1] in "+-" and l[:3] not in ("+++","---")]
    print(body, "rc", a[0], b[0], "lines", len(a[1].splitlines()), len(b[1].splitlines()), "diff lines", len(d))
    if d: print("\n".join(d[:12]))
