# One-off check (eleventh session): the decode attention kernel with VE=0 compiles to the same PTX
# as at 6f51775 (GPU-tested), up to register numbering and the template's mangled name. Run from
# tools/bench/device after ptx_same.py's setup, with attend.cuh and attend_decode.cu of 6f51775 in
# /tmp/oldk and ptx_same.py at /tmp/ptx_same.py.
import ctypes, sys, re, difflib
sys.path.insert(0, ".")
sys.argv = ["x"]
exec(open("/tmp/ptx_same.py").read().split("cases = [")[0])
B = "__nv_bfloat16"
inputs = [("q","T"),("k","T"),("v","T"),("kc","T"),("kc_shape","Shape"),("vc","T"),("pos","int32_t"),("counters","uint32_t")]
for vals in ([B,128,4,8,8,128,"SCALE"], [B,64,3,3,8,128,"SCALE"]):
    n.KERNELS = "/tmp/oldk"
    a = ptx(n.kernel_source("attend_decode.cu", "attend.cuh", inputs, ["out","part"], "T D G HKV PER BLOCK SCALE", vals))
    n.KERNELS = "/work/main/crates/gmlx-mlx/src/kernels"
    b = ptx(n.kernel_source("attend_decode.cu", "attend.cuh", inputs, ["out","part"], "T D G HKV PER BLOCK SCALE VE", vals + [0]))
    def norm(t):
        seen = {}
        return re.sub(r"%(f|r|rd|rs|p)\d+", lambda m: seen.setdefault(m.group(0), f"%{m.group(1)}#{len(seen)}"), t)
    d = [l for l in difflib.unified_diff(norm(a[1]).splitlines(), norm(b[1]).splitlines(), lineterm="", n=0) if l[:1] in "+-" and l[:3] not in ("+++","---")]
    print("\n".join(d[:16]))
    print("attend_decode.cu", vals[1], "rc", a[0], b[0], "lines", len(a[1].splitlines()), len(b[1].splitlines()), "diff lines", len(d))
