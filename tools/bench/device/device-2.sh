#!/usr/bin/env bash
# device call 2 (carry .mlxcu2 .dev2): MLX CUDA and the binaries (release, built on the 2-core
# machine against the CPU wheel, stripped); `gmlx train` 3 steps on the GPU per architecture on
# its Q4_K_M fixture with the validation rows: the first alone, so that MLX's run-time CUDA
# compilation (NVRTC) fills the kernel cache the others then read, the rest four at a time (a
# first step took 37-49 s on the H100, and none of twelve side by side finished it in 60 s:
# README.md); then the blocked-attention benchmark on the GPU. Arguments: the architectures
# (fixture folder names), all by default.
set -u
. tools/bench/device/install.sh
/root/bin/gmlx env 2>&1 | tee $OUT/env.txt
archs=${*:-$(cd /root/fx && ls *-Q4_K_M.gguf | sed 's/-Q4_K_M.gguf//')}
train() {
  local a=$1 t0=$(date +%s)
  timeout 200 /root/bin/gmlx train /root/fx/$a-Q4_K_M.gguf --data bins/gmlx-cli/tests/data/made-up-fact --adapter-out /root/ad/$a/ --iters 3 --batch-size 2 --val-every 3 --device gpu --report-every 1 > /root/train-$a.log 2>&1
  echo "rc=$? after $(( $(date +%s) - t0 )) s" >> /root/train-$a.log
}
set -- $archs
train $1; shift
n=0
for a in "$@"; do
  train $a &
  n=$((n + 1)); [ $((n % 4)) = 0 ] && wait
done
wait
for a in $archs; do echo "## $a"; grep -v "^\s*$" /root/train-$a.log | tail -6; ls /root/ad/$a/ 2>/dev/null; done 2>&1 | tee $OUT/train-fixtures.txt
echo "## MLX kernel cache: $(ls /root/ptx/*.ptx 2>/dev/null | wc -l) modules" | tee -a $OUT/train-fixtures.txt
echo "## train_attention --tokens 4096 --device gpu (16/4 heads of 256, float32)"
/root/bin/train_attention --tokens 4096 --device gpu 2>&1 | tail -6 | tee $OUT/train-attention-gpu.txt
