#!/usr/bin/env bash
# device call 3: `gmlx train` on the Qwen3.5-9B-shaped file (Q4_K, 4.94 GiB), one row per step:
# 1000 tokens with the chunked gated-delta scan and with the per-token loop
# (GMLX_TRAIN_GDN_CHUNK=0), 4096 tokens with blocked training attention and with MLX's
# whole-row attention (GMLX_TRAIN_BLOCKED_ATTN=0). Peak memory is in each progress line.
set -u
. tools/bench/device/env.sh
for i in $(seq 1 60); do grep -q "gen rc" /root/gen-qwen35.log && break; sleep 2; done; cat /root/gen-qwen35.log
Q=/root/cache/bench/qwen35-9b-Q4_K.gguf
for run in "1000 GMLX_TRAIN_GDN_CHUNK=1 140" "4096 GMLX_TRAIN_BLOCKED_ATTN=1 140" "4096 GMLX_TRAIN_BLOCKED_ATTN=0 140" "1000 GMLX_TRAIN_GDN_CHUNK=0 140"; do
  set -- $run; echo "## qwen35-9b shape, rows of $1 tokens, $2"
  t0=$(date +%s)
  env $2 timeout $3 /root/bin/gmlx train $Q --data /root/long --adapter-out /root/ad/q9/ --iters 2 --batch-size 1 --max-seq-length $1 --device gpu --report-every 1 2>&1 | grep -v "^\s*$" | tail -6
  echo "rc=${PIPESTATUS[0]} after $(( $(date +%s) - t0 )) s; MLX kernel cache: $(ls /root/ptx/*.ptx 2>/dev/null | wc -l) modules"
done 2>&1 | tee $OUT/train-qwen35-9b.txt
tail -1 /root/build.log; cat /root/gen-*.log
