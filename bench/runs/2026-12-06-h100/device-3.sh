#!/usr/bin/env bash
# device call 3 (the machine still warm from call 2): one fixture alone, with a longer limit.
set -u
. tools/bench/device/env.sh
date; timeout 140 /root/bin/gmlx train /root/fx/llama-Q4_K_M.gguf --data bins/gmlx-cli/tests/data/made-up-fact --adapter-out /root/ad/l2/ --iters 3 --batch-size 2 --val-every 3 --device gpu --report-every 1 2>&1 | tee $OUT/train-llama-gpu.txt; echo rc=${PIPESTATUS[0]}; date
