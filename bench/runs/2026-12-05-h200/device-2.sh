#!/usr/bin/env bash
# device call 2 (carry .mlxcu2 .dev2): MLX CUDA and the binaries (built on the 2-core machine
# against the CPU wheel); 3 training steps on the GPU per architecture on its Q4_K_M fixture,
# with the validation rows; then the blocked-attention benchmark on the GPU.
set -u
cat /root/mlxcu/part.aa .mlxcu2/part.ab > /root/mlxcu/w.whl && python3 -c "import zipfile; zipfile.ZipFile('/root/mlxcu/w.whl').extractall('/opt/mlxcu')"
mkdir -p /root/bin && tar xJf .dev2/bin.tar.xz -C /root/bin
cp .dev2/fx/*.gguf /root/
nv=$(python3 -c "import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))")/nvidia
export LD_LIBRARY_PATH=/opt/mlxcu/mlx/lib:/opt/mlxcu/mlx_cuda_13.libs:/root/bin/lib:$nv/cu13/lib:$nv/cudnn/lib:$nv/nccl/lib
export GMLX_CACHE_DIR=/root/cache
for f in /root/*-Q4_K_M.gguf; do
  a=$(basename $f -Q4_K_M.gguf); echo "## $a"
  timeout 60 /root/bin/gmlx train $f --data bins/gmlx-cli/tests/data/made-up-fact --adapter-out /root/ad/$a/ --iters 3 --batch-size 2 --val-every 3 --device gpu --report-every 1 > /root/train-$a.log 2>&1
  echo "rc=$?"; grep -v "^\s*$" /root/train-$a.log | tail -5
done 2>&1 | tee $OUT/train-fixtures.txt
echo "## train_attention --device gpu (4096 tokens, 16/4 heads of 256)"
/root/bin/train_attention --tokens 4096 --device gpu 2>&1 | tail -8 | tee $OUT/train-attention-gpu.txt
tail -1 /root/build.log; cat /root/gen-*.log
