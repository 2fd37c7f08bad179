#!/usr/bin/env bash
# calls 5-7 of this lease, as run (after device-1..4.sh, on the same warm machine)
. tools/bench/device/env.sh
Q=/root/cache/bench/qwen35-9b-Q4_K.gguf
# call 5 -> train-qwen35-9b-checkpoint.txt
for run in "4096 GMLX_TRAIN_BLOCKED_ATTN=1" "4096 GMLX_TRAIN_BLOCKED_ATTN=0" "1000 GMLX_TRAIN_GDN_CHUNK=0"; do
  set -- $run; echo "## qwen35-9b shape, rows of $1, $2, --grad-checkpoint"; t0=$(date +%s)
  env $2 timeout 150 /root/bin/gmlx train $Q --data /root/long --adapter-out /root/ad/q9c/ --iters 2 --batch-size 1 --max-seq-length $1 --device gpu --report-every 1 --grad-checkpoint 2>&1 | grep -v "^\s*$" | tail -5
  echo "rc=${PIPESTATUS[0]} after $(( $(date +%s) - t0 )) s"
done 2>&1 | tee $OUT/train-qwen35-9b-checkpoint.txt
# call 6 -> train-qwen35-9b-chunk-checkpoint.txt (MLX's CUDA graph cache error), ncu-q4_0-decode.csv
GMLX_TRAIN_GDN_CHUNK=1 timeout 100 /root/bin/gmlx train $Q --data /root/long --adapter-out /root/ad/q9d/ --iters 2 --batch-size 1 --max-seq-length 1000 --device gpu --report-every 1 --grad-checkpoint
F=/root/cache/bench/llama3-8b-Q4_0.gguf
timeout 300 ncu --metrics gpu__time_duration.sum --launch-skip 6000 --launch-count 1500 --csv --print-summary per-kernel /root/bin/gmlx run $F --raw -p "The quick brown fox" -n 200 --device gpu --dtype bfloat16 > $OUT/ncu-q4_0-decode.csv
# call 7 -> train-more.txt: the same run with MLX_CUDA_GRAPH_CACHE_SIZE=4000; the qwen3 fixture alone
MLX_CUDA_GRAPH_CACHE_SIZE=4000 GMLX_TRAIN_GDN_CHUNK=1 timeout 150 /root/bin/gmlx train $Q --data /root/long --adapter-out /root/ad/q9d/ --iters 2 --batch-size 1 --max-seq-length 1000 --device gpu --report-every 1 --grad-checkpoint
timeout 100 /root/bin/gmlx train /root/fx/qwen3-Q4_K_M.gguf --data bins/gmlx-cli/tests/data/made-up-fact --adapter-out /root/ad/qwen3b/ --iters 3 --batch-size 2 --val-every 3 --device gpu
