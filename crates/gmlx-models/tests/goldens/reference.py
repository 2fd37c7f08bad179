"""llama.cpp reference helpers shared by the golden scripts: the float32 copy of a GGUF
(every tensor dequantized with gguf-py and written back with its GGUFWriter), greedy runs
with top-1/top-2 margins, and a Llama handle (f32 KV cache for the exact reference)."""
import numpy as np
import gguf
from llama_cpp import Llama


def float32_copy(src, dst):
    reader = gguf.GGUFReader(src)
    arch = reader.get_field("general.architecture").contents()
    writer = gguf.GGUFWriter(dst, arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), vtype, sub_type=sub)
    for t in reader.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        writer.add_tensor(t.name, values, raw_dtype=gguf.GGMLQuantizationType.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


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
