#!/usr/bin/env bash
# device call (carry .devm2; after device-1.sh, a call that installed the binaries (install.sh:
# any call with .mlxcu2 .dev2) and one that carried .devm1: `mkdir -p /root/model && cp
# .devm1/part.aa /root/model/`): the default model (SmolLM2-135M-Instruct Q4_1, the file of the
# goldens) decoded greedily on the GPU, 32 tokens after the golden's raw prompt, once under each
# of VARIANTS (dtype, then settings: comma-separated words), and how many of llama.cpp's greedy
# tokens each output reproduces (tools/bench/device/parity_text.py against
# crates/gmlx-models/tests/goldens/smollm2_q4_1.json: its quantized reference, llama.cpp's CPU
# products with 8-bit activations, and its exact one).
set -u
. tools/bench/device/env.sh
# where gmlx looks for its default model (GMLX_CACHE_DIR, env.sh), for device-serve.sh too
M=$GMLX_CACHE_DIR/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f $M ] || { mkdir -p ${M%/*} && cat /root/model/part.aa .devm2/part.ab > $M; }
G=crates/gmlx-models/tests/goldens/smollm2_q4_1.json
P=$(python3 -c "import json; print(json.load(open('$G'))['prompt'])")
# each variant's text and log under /root/parity; two files come back whatever VARIANTS holds
# (a call brings back at most 8): parity.txt (the counts) and parity-runs.txt (texts and logs)
D=/root/parity; rm -rf $D; mkdir -p $D
outs=()
for v in ${VARIANTS:-float32,X=0 bfloat16,GMLX_CUDA_QMV_Q8=0 bfloat16,X=0 float16,GMLX_CUDA_QMV_Q8=0 float16,X=0}; do
  dtype=${v%%,*}; settings=${v#*,}
  o=$D/parity-$dtype-${settings//[=,]/-}.txt
  env ${settings//,/ } /root/bin/gmlx run $M --device gpu --dtype $dtype --raw -p "$P" -n 32 \
    --ignore-eos > $o 2> ${o%.txt}.log
  echo "## $dtype $settings: rc $?"; cat $o; echo
  outs+=($o)
done
for o in "${outs[@]}"; do
  echo "## ${o##*/}"; cat $o; echo; echo "## ${o##*/} stderr"; cat ${o%.txt}.log
done > $OUT/parity-runs.txt
PYTHONPATH=/root/llama/gguf-py python3 tools/bench/device/parity_text.py $G $M "${outs[@]}" | tee $OUT/parity.txt
