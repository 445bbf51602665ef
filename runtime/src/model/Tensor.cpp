//===- Tensor.cpp ---------------------------------------------------------===//
#include "hetplan/runtime/Tensor.h"

#include "HostBufferPool.h"

#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <type_traits>

namespace hetplan::runtime {

size_t dtypeSize(DType t) {
  switch (t) {
  case DType::Float32: case DType::Int32: case DType::UInt32: return 4;
  case DType::UInt8: case DType::Int8: case DType::Bool: return 1;
  case DType::UInt16: case DType::Int16: case DType::Float16: case DType::BFloat16: return 2;
  case DType::Int64: case DType::Float64: case DType::UInt64: return 8;
  default: return 0;
  }
}

const char *dtypeName(DType t) {
  switch (t) {
  case DType::Float32: return "float32"; case DType::UInt8: return "uint8";
  case DType::Int8: return "int8"; case DType::UInt16: return "uint16";
  case DType::Int16: return "int16"; case DType::Int32: return "int32";
  case DType::Int64: return "int64"; case DType::String: return "string";
  case DType::Bool: return "bool"; case DType::Float16: return "float16";
  case DType::Float64: return "float64"; case DType::UInt32: return "uint32";
  case DType::UInt64: return "uint64"; case DType::BFloat16: return "bfloat16";
  default: return "undefined";
  }
}

bool isFloatType(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}
bool isIntegerType(DType t) {
  switch (t) {
  case DType::UInt8: case DType::Int8: case DType::UInt16: case DType::Int16:
  case DType::Int32: case DType::Int64: case DType::UInt32: case DType::UInt64: return true;
  default: return false;
  }
}

float halfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) bits = sign;
    else { // subnormal
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) { mant <<= 1; --exp; }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) bits = sign | 0x7f800000u | (mant << 13);
  else bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  float f; std::memcpy(&f, &bits, 4); return f;
}

uint16_t floatToHalf(float f) {
  uint32_t x; std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u; int32_t exp = ((x >> 23) & 0xff); uint32_t mant = x & 0x7fffffu;
  if (exp == 255) return sign | 0x7c00u | (mant ? 0x200u : 0);
  int32_t e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00u;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000u;
    uint32_t shift = 14 - e, half = mant >> shift, rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return sign | half;
  }
  uint32_t half = sign | (uint32_t(e) << 10) | (mant >> 13), rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;
  return half;
}

uint16_t doubleToHalf(double d) {
  uint16_t sign = std::signbit(d) ? 0x8000u : 0;
  if (std::isnan(d)) return sign | 0x7e00u;
  double a = std::fabs(d);
  if (a >= 65520.0) return sign | 0x7c00u; // rounds to infinity
  if (a < 6.103515625e-05) // subnormal: units of 2^-24 (1024 rounds up to the smallest normal)
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0));
  int e = 0;
  std::frexp(a, &e); // a in [2^(e-1), 2^e)
  uint32_t q = static_cast<uint32_t>(std::nearbyint(std::ldexp(a, 11 - e))); // [1024, 2048]
  return sign | static_cast<uint16_t>((uint32_t(e - 1 + 15) << 10) + (q - 1024));
}

float bfloat16ToFloat(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;
  float f; std::memcpy(&f, &bits, 4); return f;
}

uint16_t floatToBfloat16(float f) {
  uint32_t x; std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u); // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

int64_t checkedMul(int64_t a, int64_t b, const std::string &what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw std::runtime_error(what + " overflows");
  return r;
}

int64_t checkedAdd(int64_t a, int64_t b, const std::string &what) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) throw std::runtime_error(what + " overflows");
  return r;
}

int64_t checkedNumel(const std::vector<int64_t> &shape) {
  for (int64_t d : shape)
    if (d < 0) throw std::runtime_error("negative dimension in shape " + shapeString(shape));
  return shapeNumel(shape);
}

size_t checkedBytes(int64_t count, size_t elemSize, const std::string &what) {
  int64_t bytes;
  if (count < 0 || elemSize > size_t(INT64_MAX) ||
      __builtin_mul_overflow(count, static_cast<int64_t>(elemSize), &bytes))
    throw std::runtime_error(what + ": " + std::to_string(count) + " elements of " +
                             std::to_string(elemSize) + " bytes overflow the size of a tensor");
  return static_cast<size_t>(bytes);
}

int64_t shapeNumel(const std::vector<int64_t> &shape) {
  // The product of the non-zero dims must fit, so that strides and partial
  // products over a shape with a 0 dim cannot wrap either.
  int64_t n = 1, nonZero = 1;
  bool zero = false;
  for (int64_t d : shape) {
    if (d == 0) { zero = true; continue; }
    if (__builtin_mul_overflow(nonZero, d, &nonZero))
      throw std::runtime_error("the element count of shape " + shapeString(shape) + " overflows");
  }
  n = zero ? 0 : nonZero;
  return n;
}

namespace {
size_t gMaxTensorBytes = 0;
}
void setMaxTensorBytes(size_t bytes) { gMaxTensorBytes = bytes; }
size_t maxTensorBytes() { return gMaxTensorBytes; }

size_t Tensor::nbytes() const {
  int64_t bytes;
  if (__builtin_mul_overflow(numel(), static_cast<int64_t>(dtypeSize(dtype_)), &bytes))
    throw std::runtime_error("the byte size of tensor " + describe() + " overflows");
  return static_cast<size_t>(bytes);
}

Tensor::Tensor(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) { allocate(true); }

Tensor Tensor::uninitialized(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.allocate(false);
  return t;
}

void Tensor::allocate(bool zero) {
  checkedNumel(shape_);
  size_t bytes = std::max<size_t>(nbytes(), 1);
  if (gMaxTensorBytes && bytes > gMaxTensorBytes)
    throw std::runtime_error("tensor " + describe() + " needs " + std::to_string(bytes) +
                             " bytes, more than the limit of " + std::to_string(gMaxTensorBytes));
  auto buf = takeHostBuffer(bytes, zero);
  data_ = buf.get();
  holder_ = buf;
}

Tensor Tensor::view(DType dtype, std::vector<int64_t> shape, const void *data,
                    std::shared_ptr<const void> holder) {
  Tensor t;
  t.dtype_ = dtype; t.shape_ = std::move(shape);
  t.nbytes(); // the shape's size in checked arithmetic (throws on overflow)
  t.data_ = const_cast<void *>(data); t.holder_ = std::move(holder); t.view_ = true;
  return t;
}

Tensor Tensor::onDevice(DType dtype, std::vector<int64_t> shape, void *data, std::shared_ptr<DeviceMemory> memory) {
  if (!memory) throw std::runtime_error("a device tensor needs its device memory");
  Tensor t = view(dtype, std::move(shape), data, memory);
  t.device_ = std::move(memory);
  return t;
}

Tensor Tensor::toHost() const {
  if (!device_) return *this;
  Tensor t(dtype_, shape_);
  if (nbytes()) device_->copyToHost(t.data_, data_, nbytes());
  return t;
}

int64_t Tensor::numel() const { return shapeNumel(shape_); }

void Tensor::throwNoAxis(int64_t i) const {
  throw std::runtime_error("axis " + std::to_string(i) + " of " + describe() + ": no such axis");
}

Tensor Tensor::reshaped(std::vector<int64_t> shape) const {
  if (shapeNumel(shape) != numel())
    throw std::runtime_error("cannot reshape " + describe() + " to " + shapeString(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::clone() const {
  if (device_) return toHost();
  Tensor t = uninitialized(dtype_, shape_);
  if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  t.channelsLast_ = channelsLast_;
  return t;
}

template <typename F> static auto visitNumber(const Tensor &t, int64_t i, F f) {
  switch (t.dtype()) {
  case DType::Float32: return f(t.data<float>()[i]);
  case DType::Float64: return f(t.data<double>()[i]);
  case DType::Float16: return f(halfToFloat(t.data<uint16_t>()[i]));
  case DType::BFloat16: return f(bfloat16ToFloat(t.data<uint16_t>()[i]));
  case DType::Int8: return f(t.data<int8_t>()[i]);
  case DType::UInt8: return f(t.data<uint8_t>()[i]);
  case DType::Int16: return f(t.data<int16_t>()[i]);
  case DType::UInt16: return f(t.data<uint16_t>()[i]);
  case DType::Int32: return f(t.data<int32_t>()[i]);
  case DType::UInt32: return f(t.data<uint32_t>()[i]);
  case DType::Int64: return f(t.data<int64_t>()[i]);
  case DType::UInt64: return f(t.data<uint64_t>()[i]);
  case DType::Bool: return f(t.data<uint8_t>()[i] != 0);
  default: throw std::runtime_error(std::string("not a numeric tensor: ") + dtypeName(t.dtype()));
  }
}

std::vector<int64_t> Tensor::toInt64Vector() const {
  std::vector<int64_t> v(numel());
  for (int64_t i = 0; i < numel(); ++i)
    v[i] = visitNumber(*this, i, [&](auto x) -> int64_t {
      if constexpr (std::is_floating_point_v<decltype(x)>) {
        // A float outside int64's range (or NaN) has no integer value: the
        // cast would be undefined.
        if (!(x >= -9.2233720368547758e18 && x < 9.2233720368547758e18))
          throw std::runtime_error("value " + std::to_string(double(x)) + " of " + describe() +
                                   " is not an integer that fits 64 bits");
      }
      return static_cast<int64_t>(x);
    });
  return v;
}

double Tensor::scalarAsDouble(int64_t index) const {
  if (index >= numel()) throw std::runtime_error("empty tensor where a scalar was expected");
  return visitNumber(*this, index, [](auto x) { return static_cast<double>(x); });
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? "x" : "") << shape[i];
  os << "]";
  return os.str();
}

std::string Tensor::describe() const { return std::string(dtypeName(dtype_)) + shapeString(shape_); }

std::vector<int64_t> broadcastShapes(const std::vector<int64_t> &a, const std::vector<int64_t> &b) {
  size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      throw std::runtime_error("shapes " + shapeString(a) + " and " + shapeString(b) + " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> broadcastStrides(const std::vector<int64_t> &shape, const std::vector<int64_t> &outShape) {
  size_t r = outShape.size(), off = r - shape.size();
  std::vector<int64_t> strides(r, 0);
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i + off] = shape[i] == 1 ? 0 : s;
    s *= shape[i];
  }
  return strides;
}

} // namespace hetplan::runtime
