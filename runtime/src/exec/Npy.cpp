//===- Npy.cpp - NumPy .npy files -----------------------------------------===//
#include "hetplan/runtime/Npy.h"
#include "hetplan/runtime/Files.h"

#include <cerrno>
#include <sys/stat.h>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace hetplan::runtime {

namespace {

struct Descr { const char *code; DType type; };
// '<' little-endian, '|' no byte order; '=' native (little-endian here).
constexpr Descr kDescrs[] = {
    {"f2", DType::Float16}, {"f4", DType::Float32}, {"f8", DType::Float64},
    {"i1", DType::Int8},    {"i2", DType::Int16},   {"i4", DType::Int32},
    {"i8", DType::Int64},   {"u1", DType::UInt8},   {"u2", DType::UInt16},
    {"u4", DType::UInt32},  {"u8", DType::UInt64},  {"b1", DType::Bool},
};

[[noreturn]] void fail(const std::string &path, const std::string &what) {
  throw std::runtime_error(path + ": " + what);
}

// The value of `key` in the header dict, as written (up to the next
// top-level ',' or '}').
std::string dictValue(const std::string &header, const std::string &key, const std::string &path) {
  for (const char *q : {"'", "\""}) {
    std::string k = std::string(q) + key + q;
    size_t at = header.find(k);
    if (at == std::string::npos) continue;
    size_t colon = header.find(':', at + k.size());
    if (colon == std::string::npos) break;
    size_t i = colon + 1;
    while (i < header.size() && header[i] == ' ') ++i;
    size_t j = i;
    int depth = 0;
    for (; j < header.size(); ++j) {
      char c = header[j];
      if (c == '(' || c == '[') ++depth;
      else if (c == ')' || c == ']') --depth;
      else if ((c == ',' || c == '}') && depth == 0) break;
    }
    return header.substr(i, j - i);
  }
  fail(path, "not a valid .npy file (no '" + key + "' in the header)");
}

} // namespace

Tensor readNpy(const std::string &path) {
  // Regular files only: /dev/zero or a FIFO would be read forever.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot open: ") + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return decodeNpy(bytes, path);
}

Tensor decodeNpy(const std::string &bytes, const std::string &path) {
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0)
    fail(path, "not a .npy file (no \\x93NUMPY magic)");
  unsigned major = uint8_t(bytes[6]);
  size_t headerLen, start;
  if (major == 1) {
    headerLen = uint8_t(bytes[8]) | size_t(uint8_t(bytes[9])) << 8;
    start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) fail(path, "truncated .npy header");
    headerLen = 0;
    for (int i = 0; i < 4; ++i) headerLen |= size_t(uint8_t(bytes[8 + i])) << (8 * i);
    start = 12;
  } else {
    fail(path, ".npy format version " + std::to_string(major) + " is not supported (1.0, 2.0, 3.0 are)");
  }
  if (bytes.size() < start + headerLen) fail(path, "truncated .npy header");
  std::string header = bytes.substr(start, headerLen);
  std::string descr = dictValue(header, "descr", path);
  std::string fortran = dictValue(header, "fortran_order", path);
  std::string shapeText = dictValue(header, "shape", path);

  if (descr.size() < 2) fail(path, "bad dtype " + descr);
  std::string d = descr.substr(1, descr.size() - 2); // strip quotes
  DType type = DType::Undefined;
  if (d.size() == 3 && (d[0] == '<' || d[0] == '|' || d[0] == '='))
    for (const auto &e : kDescrs)
      if (d.compare(1, 2, e.code) == 0) type = e.type;
  if (d == "?" || d == "|?") type = DType::Bool; // not written by numpy, but harmless
  if (type == DType::Undefined)
    fail(path, "element type '" + d + "' is not supported (little-endian float16/32/64, int8..64, uint8..64, bool are)");
  if (fortran.rfind("False", 0) != 0)
    fail(path, "fortran_order arrays are not supported (save a C-contiguous array: np.ascontiguousarray)");

  std::vector<int64_t> shape;
  {
    std::string s = shapeText;
    for (char &c : s)
      if (c == '(' || c == ')' || c == ',') c = ' ';
    std::istringstream ss(s);
    std::string tok;
    while (ss >> tok) {
      char *end = nullptr;
      errno = 0;
      long long v = std::strtoll(tok.c_str(), &end, 10);
      if ((*end != 0 && *end != 'L') || errno == ERANGE || v < 0) fail(path, "bad shape " + shapeText);
      shape.push_back(v);
    }
  }
  // The size the header claims, in checked arithmetic, against the bytes the
  // file has: before anything is allocated.
  size_t dataStart = start + headerLen;
  size_t need = 0;
  try {
    need = checkedBytes(checkedNumel(shape), dtypeSize(type), "shape " + shapeText);
  } catch (const std::exception &) {
    fail(path, "shape " + shapeText + " overflows the size of a tensor");
  }
  if (bytes.size() - dataStart != need)
    fail(path, "holds " + std::to_string(bytes.size() - dataStart) + " bytes of data, shape " + shapeText +
                   " of " + dtypeName(type) + " needs " + std::to_string(need));
  Tensor t(type, shape);
  if (t.nbytes()) std::memcpy(t.raw(), bytes.data() + dataStart, t.nbytes());
  return t;
}

std::string encodeNpy(const Tensor &t) {
  const char *code = nullptr;
  for (const auto &e : kDescrs)
    if (e.type == t.dtype()) code = e.code;
  if (!code) throw std::runtime_error(std::string("cannot write ") + dtypeName(t.dtype()) + " to .npy");
  std::string order = (t.dtype() == DType::Int8 || t.dtype() == DType::UInt8 || t.dtype() == DType::Bool) ? "|" : "<";
  std::string shape = "(";
  for (size_t i = 0; i < t.shape().size(); ++i) shape += std::to_string(t.shape()[i]) + (t.shape().size() == 1 || i + 1 < t.shape().size() ? "," : "");
  shape += ")";
  // numpy writes "(2, 3)" and "(5,)"; spaces are optional for readers.
  std::string dict = "{'descr': '" + order + code + "', 'fortran_order': False, 'shape': " + shape + ", }";
  bool v1 = dict.size() + 11 + 1 <= 65535;
  size_t pre = v1 ? 10 : 12;
  size_t total = pre + dict.size() + 1;
  size_t padded = (total + 63) / 64 * 64;
  dict.append(padded - total, ' ');
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += char(v1 ? 1 : 2);
  out += char(0);
  size_t len = dict.size();
  for (size_t i = 0; i < (v1 ? 2u : 4u); ++i) out += char((len >> (8 * i)) & 0xff);
  out += dict;
  out.append(static_cast<const char *>(t.raw()), t.nbytes());
  return out;
}

void writeNpy(const std::string &path, const Tensor &tensor) {
  std::string error;
  if (!writeFileAtomically(path, encodeNpy(tensor), error)) throw std::runtime_error(error);
}

} // namespace hetplan::runtime
