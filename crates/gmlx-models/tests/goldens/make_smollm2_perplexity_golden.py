"""llama.cpp's teacher-forced log-probabilities of a text on SmolLM2-135M-Instruct.Q4_1.gguf
(the default model), the reference of `gmlx perplexity`.

- tokens: the text as llama.cpp tokenizes it for llama-perplexity (special tokens added as
  the metadata says, special tokens in the text not parsed).
- exact: llama.cpp on a float32 copy of the file (every tensor dequantized with gguf-py and
  written back with its GGUFWriter), float32 KV cache, the whole text in one batch: for every
  token after the first, its natural log-probability (log-softmax of llama.cpp's logits at
  the position before it, in float64), and the perplexity exp(mean negative log-likelihood).
- quantized: the same on the file itself with an f16 KV cache (as users run it); llama.cpp
  quantizes activations to 8 bits inside its quantized products, so these differ from exact
  float32 math on the same weights.

Environment: as make_smollm2_golden.py (PYTHONPATH=<llama-cpp-python 0.3.36 sdist>,
LLAMA_CPP_LIB_PATH=<llama.cpp cmake build>/bin, numpy, gguf==0.19.0).
Usage: make_smollm2_perplexity_golden.py MODEL.gguf OUT.json
"""
import json
import math
import os
import sys
import tempfile

import numpy as np
import gguf
import llama_cpp

from reference import float32_copy, open_llama

MODEL, OUT = sys.argv[1], sys.argv[2]
TEXT = (
    "The lighthouse keeper wrote in his log every evening, even when nothing happened. "
    "On the night of the storm he noted the wind from the north-east, the barometer falling "
    "fast, and a small fishing boat that did not come home until morning. Years later, his "
    "daughter found the books in a trunk and read them aloud to her children, who asked why "
    "anyone would write down the weather. She told them that a record is a promise to the "
    "people who come after you: you cannot know which line they will need."
)


def logprobs(llm, tokens):
    llm.reset()
    llm.eval(tokens)
    out = []
    for i in range(len(tokens) - 1):
        row = np.array(llm.scores[i], dtype=np.float64)
        top = row.max()
        lse = top + math.log(np.exp(row - top).sum())
        out.append(round(float(row[tokens[i + 1]] - lse), 6))
    return out


def summary(lps):
    nll = -sum(lps) / len(lps)
    return {"logprobs": lps, "mean_nll": round(nll, 6), "perplexity": round(math.exp(nll), 6)}


with tempfile.TemporaryDirectory() as tmp:
    copy = os.path.join(tmp, "f32.gguf")
    float32_copy(MODEL, copy)
    exact = open_llama(copy, kv_f32=True)
    tokens = exact.tokenize(TEXT.encode(), add_bos=True, special=False)
    exact_lps = logprobs(exact, tokens)
    del exact
quantized = open_llama(MODEL, kv_f32=False)
assert quantized.tokenize(TEXT.encode(), add_bos=True, special=False) == tokens
quantized_lps = logprobs(quantized, tokens)

golden = {
    "model": os.path.basename(MODEL),
    "llama_cpp_python": llama_cpp.__version__,
    "gguf_py": "0.19.0",
    "config": "n_ctx 512, n_batch 512, 2 threads, no flash attention, logits for every "
              "position, the whole text in one batch",
    "text": TEXT,
    "tokens": tokens,
    "exact": {"kv_cache": "f32", **summary(exact_lps)},
    "quantized": {"kv_cache": "f16", **summary(quantized_lps)},
}
with open(OUT, "w") as f:
    json.dump(golden, f)
print(f"{len(tokens)} tokens; perplexity exact {golden['exact']['perplexity']}, "
      f"quantized {golden['quantized']['perplexity']}")
