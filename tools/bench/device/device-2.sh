#!/usr/bin/env bash
# device call 2 (carry .mlxcu2 .dev2): MLX CUDA and the binaries (release, built on the 2-core
# machine against the CPU wheel, stripped); `gmlx train` 3 steps on the GPU per architecture on
# its Q4_K_M fixture with the validation rows, four at a time (a first step took 37-49 s on the
# H100, and none of twelve side by side finished it in 60 s: README.md); then the
# blocked-attention benchmark on the GPU.
set -u
cat /root/mlxcu/part.aa .mlxcu2/part.ab > /root/mlxcu/w.whl && python3 -c "import zipfile; zipfile.ZipFile('/root/mlxcu/w.whl').extractall('/opt/mlxcu')"
tar xJf .dev2/bin.tar.xz -C /root && mkdir -p /root/fx && cp .dev2/fx/*.gguf /root/fx/
. tools/bench/device/env.sh
/root/bin/gmlx env 2>&1 | tee $OUT/env.txt
n=0
for f in /root/fx/*-Q4_K_M.gguf; do
  a=$(basename $f -Q4_K_M.gguf)
  (timeout 150 /root/bin/gmlx train $f --data bins/gmlx-cli/tests/data/made-up-fact --adapter-out /root/ad/$a/ --iters 3 --batch-size 2 --val-every 3 --device gpu --report-every 1 > /root/train-$a.log 2>&1; echo "rc=$?" >> /root/train-$a.log) &
  n=$((n + 1)); [ $((n % 4)) = 0 ] && wait
done
wait
for f in /root/fx/*-Q4_K_M.gguf; do a=$(basename $f -Q4_K_M.gguf); echo "## $a"; grep -v "^\s*$" /root/train-$a.log | tail -5; done 2>&1 | tee $OUT/train-fixtures.txt
echo "## train_attention --tokens 4096 --device gpu (16/4 heads of 256, float32)"
/root/bin/train_attention --tokens 4096 --device gpu 2>&1 | tail -6 | tee $OUT/train-attention-gpu.txt
