#!/usr/bin/env bash
# device call (carry .mlxcu2 .dev2 or nothing, after device-parity.sh put the default model where
# gmlx looks for it): the server's engine on the GPU (`serve_bench`, the `serve` bench of
# gmlx-serve: aggregate decode tok/s of the default model at STREAMS concurrent streams, TOKENS
# each) without and with the scheduler's read-ahead, alternating ROUNDS (2) times; each run
# prints how many steps it read ahead.
set -u
. tools/bench/device/install.sh
ls $GMLX_CACHE_DIR/models/SmolLM2-135M-Instruct.Q4_1.gguf || exit 1
for round in $(seq 1 ${ROUNDS:-2}); do
  for mode in never gpu; do
    echo "## round $round, --read-ahead $mode"
    timeout 200 /root/bin/serve_bench --streams ${STREAMS:-1,2,4,8} --tokens ${TOKENS:-128} \
      --read-ahead $mode 2>&1 | grep -E "^streams|^read-ahead|^json" | tee -a $OUT/serve-read-ahead.txt
  done
done
