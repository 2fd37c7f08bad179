"""llama.cpp check of an adapter written by `gmlx distill`: llama.cpp (float32 copy of the base,
f32 KV cache, the adapter through `lora_path` at scale 1) scores the token ids that
`gmlx perplexity --adapter ... --json` scored, and the next-token log-probabilities are compared
position by position. The same comparison without the adapter on either side says how far the
adapter moves them (what the check can see).

Environment as for crates/gmlx-models/tests/goldens/make_smollm2_golden.py. Usage:
distill_adapter_llama_cpp.py BASE.gguf ADAPTER.gguf GMLX_WITH.json GMLX_WITHOUT.json
"""
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "crates", "gmlx-models", "tests", "goldens"))
from reference import float32_copy, open_llama  # noqa: E402

BASE, ADAPTER, WITH, WITHOUT = sys.argv[1:5]


def logprobs(llm, tokens):
    llm.reset()
    llm.eval(tokens)
    out = []
    for p in range(len(tokens) - 1):
        row = np.array(llm.scores[p], dtype=np.float64)
        m = row.max()
        out.append(float(row[tokens[p + 1]] - m - np.log(np.exp(row - m).sum())))
    return np.array(out)


with open(WITH) as f:
    gm_with = json.load(f)
with open(WITHOUT) as f:
    gm_without = json.load(f)
tokens = gm_with["tokens"]
assert tokens == gm_without["tokens"]
with tempfile.TemporaryDirectory() as tmp:
    copy = os.path.join(tmp, "f32.gguf")
    float32_copy(BASE, copy)
    llm = open_llama(copy, kv_f32=True, lora_path=ADAPTER)
    lc_with = logprobs(llm, tokens)
    del llm
    llm = open_llama(copy, kv_f32=True)
    lc_without = logprobs(llm, tokens)
    del llm
g_with = np.array(gm_with["logprobs"])
g_without = np.array(gm_without["logprobs"])
print(f"{len(tokens)} tokens, {len(g_with)} next-token log-probabilities")
print(f"max |gmlx - llama.cpp| with the adapter:    {np.abs(g_with - lc_with).max():.3e}")
print(f"max |gmlx - llama.cpp| without the adapter: {np.abs(g_without - lc_without).max():.3e}")
print(f"max |with - without| (llama.cpp):           {np.abs(lc_with - lc_without).max():.3e}")
print(f"mean log-probability with / without (llama.cpp): {lc_with.mean():.4f} / "
      f"{lc_without.mean():.4f}")
