"""Whether every kernel form of nvrtc_check.py compiles to the same PTX (nvrtc_check.ptx's
normalization) from the kernels in OLD_DIR as from the checkout's: a check that a change to
the kernels' code leaves what they compute alone, before a GPU lease. Run from
tools/bench/device with the NVRTC venv (see nvrtc_check.py), after e.g.
    mkdir -p /tmp/oldk && for f in $(ls ../../../crates/gmlx-mlx/src/kernels); do
      git show HEAD:crates/gmlx-mlx/src/kernels/$f > /tmp/oldk/$f; done
    python ptx_compare.py /tmp/oldk [kernel name filter]
Exit status 1 when a form differs or does not compile.
"""
import sys

import nvrtc_check as n


def main():
    old_dir = sys.argv[1]
    only = sys.argv[2] if len(sys.argv) > 2 else ""
    lib, include = n.nvrtc()
    new_dir = n.KERNELS
    same = True
    count = 0
    for body, header, ins, outs, params, forms in n.FORMS:
        if only not in body:
            continue
        for values in forms:
            n.KERNELS = old_dir
            old = n.ptx(lib, include, n.kernel_source(body, header, ins, outs, params, values))
            n.KERNELS = new_dir
            new = n.ptx(lib, include, n.kernel_source(body, header, ins, outs, params, values))
            eq = old == new and old[0] == 0
            same &= eq
            count += 1
            label = " ".join(f"{k}={v}" for k, v in zip(params.split(), values))
            print(f"{'same' if eq else 'DIFF'} {body} {label}")
    print(f"{count} forms, {'all the same PTX' if same else 'some differ'}")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
