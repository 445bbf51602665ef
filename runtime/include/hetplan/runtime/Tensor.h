//===- Tensor.h - a dense tensor for the CPU runtime ------------*- C++ -*-===//
//
// A Tensor is a shape, an element type (ONNX's numbering) and bytes. The
// bytes are either owned (allocated here) or a view of memory that someone
// else keeps alive (a memory-mapped external data file, a parsed model): a
// shared holder keeps that memory alive as long as any view exists. A
// device tensor's bytes are GPU memory (the CUDA backend makes them,
// docs/gpu.md "Device-resident values"): its shape and type are read as
// any tensor's, its bytes only through toHost().
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hetplan/runtime/Checked.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hetplan::runtime {

/// Element types, numbered as ONNX's TensorProto.DataType.
enum class DType : int32_t {
  Undefined = 0, Float32 = 1, UInt8 = 2, Int8 = 3, UInt16 = 4, Int16 = 5,
  Int32 = 6, Int64 = 7, String = 8, Bool = 9, Float16 = 10, Float64 = 11,
  UInt32 = 12, UInt64 = 13, BFloat16 = 16,
};

/// Bytes per element (0 for Undefined/String).
size_t dtypeSize(DType t);
/// "float32", "int64", ...
const char *dtypeName(DType t);
bool isFloatType(DType t);   // float16/bfloat16/float32/float64
bool isIntegerType(DType t); // signed or unsigned integers (not bool)

float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
/// float16 from double in one rounding (round half to even), as numpy does.
uint16_t doubleToHalf(double d);
float bfloat16ToFloat(uint16_t b);
/// Round half to even; NaN stays NaN.
uint16_t floatToBfloat16(float f);

/// GPU memory behind device tensors (Tensor::isDevice). The CUDA backend
/// implements it (runtime/src/cuda/CudaDevice.h); nothing else reads it, so
/// host-only code needs no GPU API.
class DeviceMemory {
public:
  virtual ~DeviceMemory() = default;
  virtual int device() const = 0;
  /// Copies `bytes` from `src` (inside this memory) to host `dst`, once
  /// the memory's producer has written them; returns when they are there.
  virtual void copyToHost(void *dst, const void *src, size_t bytes) const = 0;
};

class Tensor {
public:
  Tensor() = default;
  /// An owned, zero-filled tensor.
  Tensor(DType dtype, std::vector<int64_t> shape);
  /// An owned tensor whose bytes are not cleared: for kernels that write
  /// every element (saves a pass over memory per output).
  static Tensor uninitialized(DType dtype, std::vector<int64_t> shape);
  /// A view of `data`; `holder` keeps the memory alive.
  static Tensor view(DType dtype, std::vector<int64_t> shape, const void *data,
                     std::shared_ptr<const void> holder);
  /// A device tensor: `data` points into `memory` (GPU memory), which
  /// the tensor keeps alive.
  static Tensor onDevice(DType dtype, std::vector<int64_t> shape, void *data, std::shared_ptr<DeviceMemory> memory);
  /// A 1-element rank-0 tensor.
  template <typename T> static Tensor scalar(DType dtype, T value) {
    Tensor t(dtype, {});
    *t.data<T>() = value;
    return t;
  }

  bool defined() const { return dtype_ != DType::Undefined; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t> &shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  /// Size of axis i (negative: from the end). Checked: an axis the tensor
  /// does not have throws (a kernel meeting a rank the verifier could not
  /// know fails with a message instead of reading past the shape).
  int64_t dim(int64_t i) const {
    int64_t a = i < 0 ? i + rank() : i;
    if (a < 0 || a >= rank()) throwNoAxis(i);
    return shape_[size_t(a)];
  }
  int64_t numel() const;
  /// numel() * element size (checked: throws rather than wrap).
  size_t nbytes() const;
  /// True when the bytes belong to someone else (mapped file, model proto).
  bool isView() const { return view_; }
  /// True when the bytes are GPU memory: raw() is a device address (never
  /// read it on the host; toHost() copies it).
  bool isDevice() const { return device_ != nullptr; }
  const std::shared_ptr<DeviceMemory> &deviceMemory() const { return device_; }
  /// A host tensor of the same values: *this when already on the host, an
  /// owned copy of a device tensor's bytes otherwise.
  Tensor toHost() const;

  void *raw() { return data_; }
  const void *raw() const { return data_; }
  template <typename T> T *data() { return static_cast<T *>(data_); }
  template <typename T> const T *data() const { return static_cast<const T *>(data_); }

  /// True when a float tensor of rank 3-5 holds its bytes channels-last
  /// (N, spatial..., C) while shape() stays ONNX's (N, C, spatial...): what
  /// one Conv hands the next without reordering (Executor, Conv.cpp). Only
  /// the Conv kernel reads such bytes; the executor gives every other
  /// kernel, and every caller, plain ones (cpu::plainLayout).
  bool channelsLast() const { return channelsLast_; }
  void setChannelsLast(bool v) { channelsLast_ = v; }

  /// Same bytes, another shape with the same element count.
  Tensor reshaped(std::vector<int64_t> shape) const;
  /// An owned host copy (of a device tensor: toHost()).
  Tensor clone() const;
  /// Values as int64 (any integer type); for shape-like inputs.
  std::vector<int64_t> toInt64Vector() const;
  /// Values as double (any numeric type); for scalars such as Clip's bounds.
  double scalarAsDouble(int64_t index = 0) const;
  /// "float32[2x3]"
  std::string describe() const;

private:
  [[noreturn]] void throwNoAxis(int64_t i) const;
  void allocate(bool zero);
  DType dtype_ = DType::Undefined;
  std::vector<int64_t> shape_;
  std::shared_ptr<const void> holder_;
  void *data_ = nullptr;
  bool view_ = false;
  bool channelsLast_ = false;
  std::shared_ptr<DeviceMemory> device_; // set for device tensors only
};

/// Element count of a shape; throws when it overflows int64 (Checked.h).
int64_t shapeNumel(const std::vector<int64_t> &shape);
/// Largest owned tensor (bytes) the Tensor constructor allocates; larger
/// ones throw a one-line error instead. Unlimited (0) by default; the fuzz
/// targets and embedders that run untrusted models set a budget.
void setMaxTensorBytes(size_t bytes);
size_t maxTensorBytes();

/// Bytes held by the pool of released host buffers (64 KiB and larger) that
/// new tensors take before asking malloc (src/model/HostBufferPool.h).
size_t hostBufferPoolBytes();
/// False in sanitizer builds and with HETPLAN_HOST_POOL_BYTES=0.
bool hostBufferPoolEnabled();
/// The cap on those bytes (1 GiB unless HETPLAN_HOST_POOL_BYTES says
/// otherwise); buffers beyond it are freed now. 0 empties the pool.
void setHostBufferPoolLimit(size_t bytes);
/// numpy broadcasting of two shapes; throws on incompatible shapes.
std::vector<int64_t> broadcastShapes(const std::vector<int64_t> &a,
                                     const std::vector<int64_t> &b);
/// Row-major strides for `shape` when viewed (broadcast) as `outShape`:
/// 0 where a dimension is broadcast. `shape` is right-aligned.
std::vector<int64_t> broadcastStrides(const std::vector<int64_t> &shape,
                                      const std::vector<int64_t> &outShape);
std::string shapeString(const std::vector<int64_t> &shape);

} // namespace hetplan::runtime
