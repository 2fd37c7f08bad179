# One-off check (thirteenth session): with the early loads on (EARLY=1, the default), and with
# them off under exact products (Q8=0), every 4-bit kernel form of nvrtc_check.py compiles to
# the same PTX as at 9a667b9, after the change that lets EARLY=0 turn them off under 8-bit
# activations too (before, Q8=1 always took them). Shared arrays' mangled names and registers
# are normalized. Run from tools/bench/device with the NVRTC venv after
#   for f in $(ls crates/gmlx-mlx/src/kernels); do
#     git show 9a667b9:crates/gmlx-mlx/src/kernels/$f > /tmp/oldk/$f; done
import sys
sys.path.insert(0, ".")
import nvrtc_check as n
lib, inc = n.nvrtc()
NEW = n.KERNELS


def ptx(src):
    return n.ptx(lib, inc, src)


same = True
count = 0
for body, header, ins, outs, params, values in [
        form[:5] + (v,) for form in n.FORMS if form[0].startswith("qmv4") for v in form[5]]:
    c = dict(zip(params.split(), values))
    if c.get("EARLY", 1) == 0 and c.get("Q8", 0) == 1:
        continue
    n.KERNELS = "/tmp/oldk"
    old = ptx(n.kernel_source(body, header, ins, outs, params, values))
    n.KERNELS = NEW
    new = ptx(n.kernel_source(body, header, ins, outs, params, values))
    eq = old == new and old[0] == 0
    same &= eq
    count += 1
    print(f"{body} {c}: rc {old[0]}/{new[0]}, PTX {'identical' if eq else 'DIFFERS'}")
print(f"{count} forms, {'all identical' if same else 'some differ'}")
sys.exit(0 if same else 1)
