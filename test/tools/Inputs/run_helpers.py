"""Helpers for the `hetplan run` lit tests.

  run_helpers.py npy FILE DTYPE D0xD1...   write an .npy of zeros (int64: 1s)
  run_helpers.py schema PLAN OUT VERSION   rewrite a plan's schema_version (and its CRC)
  run_helpers.py touch FILE                append one byte to a file
"""
import struct, sys, zlib

import numpy as np

cmd = sys.argv[1]
if cmd == "npy":
    shape = [int(d) for d in sys.argv[4].split("x")] if sys.argv[4] else []
    np.save(sys.argv[2], np.ones(shape, dtype=sys.argv[3]))
elif cmd == "schema":
    data = open(sys.argv[2], "rb").read()
    body = bytearray(data[20:])
    # Deterministic serialization writes schema_version (field 1, varint)
    # first: bytes 08 01.
    assert body[0] == 0x08 and body[1] == 0x01, body[:2]
    body[1] = int(sys.argv[4])
    header = data[:8] + struct.pack("<QI", len(body), zlib.crc32(bytes(body)) & 0xFFFFFFFF)
    open(sys.argv[3], "wb").write(header + bytes(body))
elif cmd == "touch":
    with open(sys.argv[2], "ab") as f:
        f.write(b"\0")
