#!/usr/bin/env bash
# device call 4: `xtask bench gpu` (the xtask binary runs the same code as `cargo xtask bench
# gpu`) once the llama-bench build and the files of call 1 are there (FILES of them written);
# TYPES (Q4_0,Q4_K by default: the files device-1.sh writes; another type's file is written by
# xtask, which needs tests/fixtures/qwen35/qwen35-Q8_0.gguf, absent from a slim tree) and ROUNDS
# as its options.
set -u
. tools/bench/device/env.sh
export GMLX_BENCH_RUNS=$OUT CARGO_MANIFEST_DIR=$PWD/xtask
for i in $(seq 1 100); do grep -q "build rc" /root/build.log && [ $(cat /root/gen-*.log | grep -c "gen rc") -ge ${FILES:-5} ] && break; sleep 3; done
tail -1 /root/build.log; cat /root/gen-*.log; ls -la /root/cache/bench
/root/bin/xtask bench gpu --types ${TYPES:-Q4_0,Q4_K} --rounds ${ROUNDS:-3} --gmlx /root/bin/gmlx --llama-cpp /root/llama --python python3 2>&1 | tee $OUT/bench-gpu.txt
