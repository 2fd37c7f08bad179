#!/usr/bin/env bash
# device call 2 (carry .mlxcu2 .dev2): MLX CUDA and the binaries (release, built on the 2-core
# machine against the CPU wheel, stripped); `gmlx train` 3 steps on the GPU per architecture on
# its Q4_K_M fixture with the validation rows (all twelve at once, 60 s each); the
# blocked-attention benchmark on the GPU; then `gmlx train` on the Qwen3.5-9B-shaped file (Q4_K),
# one row of 1000 tokens per step (chunked gated-delta scan) and one of 4096 (blocked training
# attention), 60 s each. The limits were what the session's device time had left.
set -u
cat /root/mlxcu/part.aa .mlxcu2/part.ab > /root/mlxcu/w.whl && python3 -c "import zipfile; zipfile.ZipFile('/root/mlxcu/w.whl').extractall('/opt/mlxcu')"
tar xJf .dev2/bin.tar.xz -C /root && mkdir -p /root/fx && cp .dev2/fx/*.gguf /root/fx/
. tools/bench/device/env.sh
/root/bin/gmlx env 2>&1 | tee $OUT/env.txt
for f in /root/fx/*-Q4_K_M.gguf; do
  a=$(basename $f -Q4_K_M.gguf)
  (timeout 60 /root/bin/gmlx train $f --data bins/gmlx-cli/tests/data/made-up-fact --adapter-out /root/ad/$a/ --iters 3 --batch-size 2 --val-every 3 --device gpu --report-every 1 > /root/train-$a.log 2>&1; echo "rc=$?" >> /root/train-$a.log) &
done
wait
for f in /root/fx/*-Q4_K_M.gguf; do a=$(basename $f -Q4_K_M.gguf); echo "## $a"; grep -v "^\s*$" /root/train-$a.log | tail -5; done 2>&1 | tee $OUT/train-fixtures.txt
echo "## train_attention --tokens 4096 --device gpu (16/4 heads of 256, float32)"
/root/bin/train_attention --tokens 4096 --device gpu 2>&1 | tail -6 | tee $OUT/train-attention-gpu.txt
for i in $(seq 1 60); do grep -q "gen rc" /root/gen-qwen35.log && break; sleep 2; done; cat /root/gen-qwen35.log
Q=/root/cache/bench/qwen35-9b-Q4_K.gguf
for run in "1000 GMLX_TRAIN_GDN_CHUNK=1 60" "4096 GMLX_TRAIN_BLOCKED_ATTN=1 60"; do
  set -- $run; echo "## qwen35-9b shape, rows of $1 tokens, $2"
  env $2 timeout $3 /root/bin/gmlx train $Q --data /root/long --adapter-out /root/ad/q9/ --iters 2 --batch-size 1 --max-seq-length $1 --device gpu --report-every 1 2>&1 | grep -v "^\s*$" | tail -6
  echo "rc=${PIPESTATUS[0]}"
done 2>&1 | tee $OUT/train-qwen35-9b.txt
tail -1 /root/build.log; cat /root/gen-*.log
