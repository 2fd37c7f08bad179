#!/usr/bin/env python3
"""Oracle for gmlx-gguf's codecs: dequantize raw blocks with gguf.quants.dequantize.

Usage: dequant.py MANIFEST
MANIFEST has one line per job: `TYPE_NAME INPUT OUTPUT` (INPUT: raw blocks, OUTPUT: f32 LE).
Prints `ok TYPE` or `unsupported TYPE` per line. Plain integer / F64 types, which
gguf.quants does not handle, are converted with NumPy's astype(np.float32) and reported as
`numpy TYPE`.
"""
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGML_QUANT_SIZES
from gguf import quants

NUMPY_TYPES = {"I8": np.int8, "I16": np.int16, "I32": np.int32, "I64": np.int64, "F64": np.float64}


def main() -> None:
    with open(sys.argv[1]) as f:
        jobs = [line.split() for line in f if line.strip()]
    for name, inp, outp in jobs:
        raw = np.fromfile(inp, dtype=np.uint8)
        if name in NUMPY_TYPES:
            out = raw.view(NUMPY_TYPES[name]).astype(np.float32)
            out.astype("<f4").tofile(outp)
            print("numpy", name)
            continue
        if name not in GGMLQuantizationType.__members__:
            print("unsupported", name)
            continue
        qtype = GGMLQuantizationType[name]
        block, size = GGML_QUANT_SIZES[qtype]
        rows = raw.reshape((-1, size))
        try:
            with np.errstate(over="ignore"):
                out = quants.dequantize(rows, qtype)
        except NotImplementedError:
            print("unsupported", name)
            continue
        out = np.asarray(out, dtype=np.float32).reshape(-1)
        out.astype("<f4").tofile(outp)
        print("ok", name)


main()
