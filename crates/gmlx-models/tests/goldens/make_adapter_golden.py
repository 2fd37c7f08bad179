"""llama.cpp golden for a LoRA adapter written by `gmlx train` on the default model.

llama.cpp loads the base (a float32 copy, f32 KV cache: the exact reference) with the adapter
(`lora_path`, scale 1) and records, for a fixed prompt plus its own greedy continuation, the
logits at every position for its top-16 ids and 64 fixed ids. The Rust test
(`tests/adapter_interop.rs`) loads the original Q4_1 file with the same adapter applied live
and must agree within 1e-3.

Environment as for make_smollm2_golden.py. Usage:
make_adapter_golden.py BASE.gguf ADAPTER.gguf OUT.json
"""
import json
import os
import sys
import tempfile

import numpy as np
import llama_cpp

from reference import float32_copy, greedy, open_llama, positions

BASE, ADAPTER, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
PROMPT = "The capital of Zorbania is"
N_PREDICT = 8
TOP = 16
FIXED_IDS = sorted(np.random.default_rng(99).choice(49152, 64, replace=False).tolist())

with tempfile.TemporaryDirectory() as tmp:
    copy = os.path.join(tmp, "f32.gguf")
    float32_copy(BASE, copy)
    llm = open_llama(copy, kv_f32=True, lora_path=ADAPTER)
    prompt_ids = llm.tokenize(PROMPT.encode(), add_bos=True, special=False)
    tokens, margins = greedy(llm, prompt_ids, N_PREDICT)
    sequence = prompt_ids + tokens
    per_position = positions(llm, sequence, TOP, FIXED_IDS)
    golden = {
        "base": os.path.basename(BASE),
        "adapter": os.path.basename(ADAPTER),
        "prompt": PROMPT,
        "llama_cpp_python": llama_cpp.__version__,
        "config": "float32 copy of the base, f32 KV cache, lora_path with scale 1, n_ctx 512, "
                  "2 threads, no flash attention",
        "prompt_ids": prompt_ids,
        "greedy": tokens,
        "margins": margins,
        "text": llm.detokenize(tokens).decode("utf-8", "replace"),
        "sequence": sequence,
        "fixed_ids": FIXED_IDS,
        "positions": per_position,
    }
    del llm

with open(OUT, "w") as f:
    json.dump(golden, f, indent=1)
print(golden["text"])
