#!/usr/bin/env python3
"""Oracle for whole files: dequantize every tensor of a GGUF with GGUFReader + gguf.quants.

Usage: dequant_file.py MODEL OUT
Writes the f32 (little-endian) values of every tensor, in tensor-table order, concatenated
into OUT, and prints one line per tensor: `name type n_elements`.
"""
import sys

import numpy as np
from gguf import GGUFReader
from gguf import quants


def main() -> None:
    r = GGUFReader(sys.argv[1])
    with open(sys.argv[2], "wb") as out:
        for t in r.tensors:
            values = np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
            values.astype("<f4").tofile(out)
            print(t.name, t.tensor_type.name, values.size)


main()
