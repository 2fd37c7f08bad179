"""llama.cpp goldens for SmolLM2-135M-Instruct.Q4_1.gguf (the default model).

Two references (see ../../../../docs/testing.md):
- exact: llama.cpp on a float32 copy of the file (every tensor dequantized with gguf-py and
  written back with its GGUFWriter), float32 KV cache: logits at every position of the
  prompt plus llama.cpp's own greedy continuation, for llama.cpp's top-16 ids at each
  position and 64 fixed ids; and the greedy tokens.
- quantized: llama.cpp on the file itself (f16 KV cache, as users run it): greedy tokens and
  the top-1 minus top-2 logit margin at each step, for the teacher-forced check.

Environment: PYTHONPATH=<llama-cpp-python 0.3.36 sdist> (the binding),
LLAMA_CPP_LIB_PATH=<llama.cpp cmake build>/bin, a Python with numpy, gguf==0.19.0,
typing_extensions, diskcache. Usage: make_smollm2_golden.py MODEL.gguf OUT.json
"""
import json
import os
import sys
import tempfile

import numpy as np
import gguf
import llama_cpp

from reference import float32_copy, greedy, open_llama, positions

MODEL, OUT = sys.argv[1], sys.argv[2]
PROMPT = "The capital of France is"
N_PREDICT = 32
TOP = 16
FIXED_IDS = sorted(np.random.default_rng(1234).choice(49152, 64, replace=False).tolist())


golden = {
    "model": os.path.basename(MODEL),
    "prompt": PROMPT,
    "llama_cpp_python": llama_cpp.__version__,
    "gguf_py": gguf.__version__ if hasattr(gguf, "__version__") else "0.19.0",
    "config": "n_ctx 512, n_batch 512, 2 threads, no flash attention; prompt in one batch, "
              "then one token per decode, argmax over the full vocabulary",
}

llm = open_llama(MODEL, kv_f32=False)
prompt_ids = llm.tokenize(PROMPT.encode(), add_bos=True, special=False)  # honours add_bos_token
tokens, margins = greedy(llm, prompt_ids, N_PREDICT)
golden["prompt_ids"] = prompt_ids
golden["quantized"] = {"kv_cache": "f16", "greedy": tokens, "margins": margins,
                       "text": llm.detokenize(tokens).decode("utf-8", "replace")}
del llm

with tempfile.TemporaryDirectory() as tmp:
    copy = os.path.join(tmp, "f32.gguf")
    float32_copy(MODEL, copy)
    llm = open_llama(copy, kv_f32=True)
    tokens, margins = greedy(llm, prompt_ids, N_PREDICT)
    sequence = prompt_ids + tokens
    per_position = positions(llm, sequence, TOP, FIXED_IDS)
    golden["exact"] = {"kv_cache": "f32", "greedy": tokens, "margins": margins,
                       "text": llm.detokenize(tokens).decode("utf-8", "replace"),
                       "sequence": sequence, "fixed_ids": FIXED_IDS, "positions": per_position}
    del llm

with open(OUT, "w") as f:
    json.dump(golden, f, indent=1)
print(golden["quantized"]["text"], "|", golden["exact"]["text"])
