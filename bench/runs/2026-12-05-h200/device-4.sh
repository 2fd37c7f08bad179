#!/usr/bin/env bash
# device call 4: `gmlx train` on the Qwen3.5-9B-shaped random file (Q4_K, 4.94 GiB) on the GPU,
# one row per step, 2 steps: rows of 1000 tokens with the chunked gated-delta scan and with the
# per-token loop (GMLX_TRAIN_GDN_CHUNK=0), rows of 4096 tokens with blocked attention and with
# MLX's whole-row attention (GMLX_TRAIN_BLOCKED_ATTN=0). Peak memory is in each progress line.
set -u
nv=$(python3 -c "import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))")/nvidia
export LD_LIBRARY_PATH=/opt/mlxcu/mlx/lib:/opt/mlxcu/mlx_cuda_13.libs:/root/bin/lib:$nv/cu13/lib:$nv/cudnn/lib:$nv/nccl/lib
export GMLX_CACHE_DIR=/root/cache
Q=/root/cache/bench/qwen35-9b-Q4_K.gguf
for run in "1000 X=1" "1000 GMLX_TRAIN_GDN_CHUNK=0" "4096 X=1" "4096 GMLX_TRAIN_BLOCKED_ATTN=0"; do
  set -- $run; echo "## rows of $1 tokens, $2"
  env $2 timeout 140 /root/bin/gmlx train $Q --data /root/long --adapter-out /root/ad/q9/ --iters 2 --batch-size 1 --max-seq-length $1 --device gpu --report-every 1 2>&1 | grep -v "^\s*$" | tail -6
  echo "rc=${PIPESTATUS[0]}"
done 2>&1 | tee $OUT/train-qwen35-9b.txt
