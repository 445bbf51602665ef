//===- FuzzNpy.cpp - .npy reader ------------------------------------------===//
//
// Bytes -> decodeNpy (the reader behind `hetplan run --input x=FILE.npy`).
// A valid file round-trips: encodeNpy(decodeNpy(b)) decodes to the same
// shape, type and bytes.
//
//===----------------------------------------------------------------------===//
#include "FuzzTarget.h"

#include "hetplan/runtime/Npy.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>

using namespace hetplan::runtime;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string bytes(reinterpret_cast<const char *>(data), size);
  Tensor t;
  try {
    t = decodeNpy(bytes, "fuzz.npy");
  } catch (const std::runtime_error &) {
    return 0; // refused with a message: fine
  }
  // Nothing is allocated beyond what the bytes hold.
  if (t.nbytes() > size) std::abort();
  Tensor back = decodeNpy(encodeNpy(t), "roundtrip.npy");
  if (back.dtype() != t.dtype() || back.shape() != t.shape() ||
      std::memcmp(back.raw(), t.raw(), t.nbytes()) != 0)
    std::abort();
  return 0;
}
