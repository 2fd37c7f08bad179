# One-off check (twelfth session): with SWZ=0 and Q8=0 (every launch unless
# GMLX_CUDA_QMV_SWIZZLE=1 or GMLX_CUDA_QMV_Q8=1 is set) the normed and the one-matrix 4-bit
# kernels compile to the same PTX as at eae95a2 (the kernels measured on the H100 that session,
# their GPU tests passed), once the mangled names of shared arrays (which carry the new
# constants) and the registers (renamed in order of first use) are normalized. Run from
# tools/bench/device with the NVRTC venv after
#   for f in qmv4.cuh qmv4.cu qmv4_add.cu qmv4_norm_silu.cu qmv4_norm_three.cu \
#       qmv4_norm_rope_three.cu; do
#     git show eae95a2:crates/gmlx-mlx/src/kernels/$f > /tmp/oldk/$f; done
import sys
sys.path.insert(0, ".")
import nvrtc_check as n
lib, inc = n.nvrtc()
B, F = "__nv_bfloat16", "float"
NEW = n.KERNELS


def ptx(src):
    return n.ptx(lib, inc, src)


same = True
for body, _, ins, outs, params, values in [
    form[:5] + (v,) for form in n.FORMS if form[0].startswith("qmv4") for v in form[5]]:
    names = params.split()
    # constants added since eae95a2, compared where SWZ and Q8 are 0 (a one-matrix kernel's
    # BLOCK is new too; the normed kernels had theirs)
    added = {"SWZ", "Q8"} | ({"BLOCK"} if body in ("qmv4.cu", "qmv4_add.cu") else set())
    if any(dict(zip(names, values)).get(a, 0) != 0 for a in ("SWZ", "Q8")):
        continue
    old_params = " ".join(x for x in names if x not in added)
    old_values = [v for x, v in zip(names, values) if x not in added]
    n.KERNELS = "/tmp/oldk"
    old = ptx(n.kernel_source(body, "qmv4.cuh", ins, outs, old_params, old_values))
    n.KERNELS = NEW
    new = ptx(n.kernel_source(body, "qmv4.cuh", ins, outs, params, values))
    eq = old == new
    same &= eq
    print(f"{body} {dict(zip(names, values))}: rc {old[0]}/{new[0]}, PTX "
          f"{'identical' if eq else 'DIFFERS'}")
sys.exit(0 if same else 1)
