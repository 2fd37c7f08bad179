#!/usr/bin/env bash
# device call 4 (still warm): two fixtures side by side, 100 s each.
set -u
. tools/bench/device/env.sh
for a in qwen35 qwen3moe; do (timeout 100 /root/bin/gmlx train /root/fx/$a-Q4_K_M.gguf --data bins/gmlx-cli/tests/data/made-up-fact --adapter-out /root/ad/$a-2/ --iters 3 --batch-size 2 --val-every 3 --device gpu --report-every 1 > /root/t2-$a.log 2>&1; echo rc=$? >> /root/t2-$a.log) & done; wait
for a in qwen35 qwen3moe; do echo "## $a"; cat /root/t2-$a.log; done | tee $OUT/train-gpu-2.txt
