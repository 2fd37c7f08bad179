"""llama.cpp reference helpers shared by the golden scripts: the float32 copy of a GGUF
(every tensor dequantized with gguf-py and written back with its GGUFWriter), greedy runs
with top-1/top-2 margins, and a Llama handle (f32 KV cache for the exact reference)."""
import os
import sys

import numpy as np
from llama_cpp import Llama

# the float32 copy is the fixture pipeline's own (tools/fixtures/golden.py)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "..", "tools", "fixtures"))
from golden import float32_copy  # noqa: E402,F401  (re-exported to the golden scripts)


def positions(llm, sequence, top, fixed_ids):
    """Per position of `sequence` (evaluated as one batch): the `top` highest logits with their
    ids, and the logits at `fixed_ids`."""
    llm.reset()
    llm.eval(sequence)
    out = []
    for p in range(len(sequence)):
        row = np.array(llm.scores[p], dtype=np.float32)
        best = np.argsort(-row, kind="stable")[:top].tolist()
        out.append({
            "top_ids": best,
            "top_logits": [round(float(row[i]), 6) for i in best],
            "fixed_logits": [round(float(row[i]), 6) for i in fixed_ids],
        })
    return out


def greedy(llm, ids, n):
    llm.reset()
    llm.eval(ids)
    out, margins = [], []
    for _ in range(n):
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        srt = np.sort(row)
        t = int(np.argmax(row))
        out.append(t)
        margins.append(round(float(srt[-1] - srt[-2]), 5))
        if t == llm.token_eos():
            break
        llm.eval([t])
    return out, margins


def open_llama(path, kv_f32, **extra):
    kw = dict(model_path=path, n_ctx=512, n_batch=512, logits_all=True, n_threads=2,
              verbose=False, seed=0, flash_attn=False)
    if kv_f32:
        kw.update(type_k=0, type_v=0)  # GGML_TYPE_F32
    kw.update(extra)
    return Llama(**kw)
