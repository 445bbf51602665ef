//===- Npy.h - NumPy .npy files as runtime tensors --------------*- C++ -*-===//
//
// Reads and writes NumPy's .npy format (versions 1.0, 2.0 and 3.0 headers),
// C order only, little-endian (or byte-order-free) element types: float16,
// float32, float64, int8..int64, uint8..uint64, bool. Errors are one line
// that starts with the file's path.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_RUNTIME_NPY_H
#define HETPLAN_RUNTIME_NPY_H

#include "hetplan/runtime/Tensor.h"

#include <string>

namespace hetplan::runtime {

/// Reads an .npy file; throws std::runtime_error("PATH: what") on error.
Tensor readNpy(const std::string &path);
/// The tensor in the bytes of an .npy file; `path` names it in errors. Only
/// the bytes given are read and nothing is allocated beyond what they hold.
Tensor decodeNpy(const std::string &bytes, const std::string &path);
/// The bytes of an .npy file (version 1.0 header when it fits, else 2.0).
std::string encodeNpy(const Tensor &tensor);
/// Writes `tensor` to `path`; throws std::runtime_error on error.
void writeNpy(const std::string &path, const Tensor &tensor);

/// SHA-256 of a file's bytes as 64 lowercase hex digits; throws
/// std::runtime_error("PATH: cannot open: ...") when it cannot be read.
std::string fileSha256(const std::string &path);
/// SHA-256 of `bytes`, lowercase hex (OpenSSL's libcrypto).
std::string sha256Hex(const std::string &bytes);
std::string sha256Hex(const void *bytes, size_t size);

} // namespace hetplan::runtime

#endif
