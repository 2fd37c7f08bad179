#!/usr/bin/env python3
"""Oracle for gmlx-gguf's writer: read a GGUF file with gguf.GGUFReader and print JSON.

Usage: read_gguf.py FILE
Output: {"alignment": int, "data_offset": int, "kvs": [{"key", "types": [type names],
"value": contents()}], "tensors": [{"name", "type": id, "dims": [ggml order], "n_elements",
"n_bytes", "data_offset", "data_hex"}]}. Nested arrays are flattened by GGUFReader.contents().
"""
import json
import sys

import numpy as np
from gguf import GGUFReader


def main() -> None:
    r = GGUFReader(sys.argv[1])
    kvs = []
    for key, field in r.fields.items():
        if key.startswith("GGUF."):
            continue
        kvs.append({"key": key, "types": [t.name for t in field.types], "value": field.contents()})
    tensors = []
    for t in r.tensors:
        tensors.append({
            "name": t.name,
            "type": int(t.tensor_type),
            "dims": [int(d) for d in t.shape],
            "n_elements": int(t.n_elements),
            "n_bytes": int(t.n_bytes),
            "data_offset": int(t.data_offset),
            "data_hex": np.ascontiguousarray(t.data).view(np.uint8).tobytes().hex(),
        })
    json.dump({"alignment": int(r.alignment), "data_offset": int(r.data_offset), "kvs": kvs,
               "tensors": tensors}, sys.stdout)


main()
