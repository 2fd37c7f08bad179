#!/usr/bin/env bash
# Sourced by a call that carries .mlxcu2 and .dev2 (after device-1.sh left MLX CUDA's first
# part): unpacks MLX's CUDA wheel into /opt/mlxcu, the binaries into /root/bin and the Q4_K_M
# fixtures into /root/fx (each once per machine: a second script in the same call skips them),
# then sources env.sh.
[ -d /opt/mlxcu/mlx ] || { cat /root/mlxcu/part.aa .mlxcu2/part.ab > /root/mlxcu/w.whl && python3 -c "import zipfile; zipfile.ZipFile('/root/mlxcu/w.whl').extractall('/opt/mlxcu')"; }
[ -x /root/bin/gmlx ] || { tar xJf .dev2/bin.tar.xz -C /root && mkdir -p /root/fx && cp .dev2/fx/*.gguf /root/fx/; }
. tools/bench/device/env.sh
