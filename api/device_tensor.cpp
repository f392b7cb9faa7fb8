#include <stdexcept>
#include <utility>

#include "codegen/numerics/fp8.hpp"
#include "codegen/numerics/half.hpp"
#include "fp8c/session.hpp"
#include "runtime/cuda_driver.hpp"

namespace fp8c {

DeviceTensor::DeviceTensor(DType dtype, std::int64_t rows, std::int64_t cols) {
  if (rows < 0 || cols < 0) throw SessionError("DeviceTensor: negative shape");
  if (!is_high_precision(dtype) && !is_fp8(dtype))
    throw SessionError("DeviceTensor: " + std::string(to_string(dtype)) +
                       " is not a tensor type (bf16, fp16, fp32, e4m3 or e5m2)");
  ref_ = {nullptr, dtype, rows, cols};
  const std::size_t bytes = static_cast<std::size_t>(rows * cols) * element_bytes(dtype);
  CUdeviceptr p = 0;
  if (bytes) FP8C_CU(runtime::driver().cuMemAlloc(&p, bytes));
  ref_.data = reinterpret_cast<void*>(p);
}

DeviceTensor::~DeviceTensor() {
  if (ref_.data) runtime::driver().cuMemFree(reinterpret_cast<CUdeviceptr>(ref_.data));
}

DeviceTensor::DeviceTensor(DeviceTensor&& other) noexcept
    : ref_(std::exchange(other.ref_, TensorRef{})) {}

DeviceTensor& DeviceTensor::operator=(DeviceTensor&& other) noexcept {
  std::swap(ref_, other.ref_);
  return *this;
}

void DeviceTensor::upload(const std::vector<float>& values) {
  const auto n = static_cast<std::size_t>(ref_.rows * ref_.cols);
  if (values.size() != n)
    throw SessionError("DeviceTensor::upload: " + std::to_string(values.size()) + " values for " +
                       std::to_string(n) + " elements");
  if (n == 0) return;
  const auto p = reinterpret_cast<CUdeviceptr>(ref_.data);
  if (ref_.dtype == ElemType::fp32) {
    FP8C_CU(runtime::driver().cuMemcpyHtoD(p, values.data(), n * 4));
    return;
  }
  if (is_fp8(ref_.dtype)) {
    std::vector<std::uint8_t> codes(n);
    for (std::size_t i = 0; i < n; ++i)
      codes[i] = numerics::float_to_fp8(values[i], ref_.dtype, numerics::Saturation::satfinite);
    FP8C_CU(runtime::driver().cuMemcpyHtoD(p, codes.data(), n));
    return;
  }
  std::vector<std::uint16_t> bits(n);
  for (std::size_t i = 0; i < n; ++i)
    bits[i] = ref_.dtype == ElemType::bf16 ? numerics::float_to_bf16(values[i])
                                           : numerics::float_to_fp16(values[i]);
  FP8C_CU(runtime::driver().cuMemcpyHtoD(p, bits.data(), n * 2));
}

std::vector<float> DeviceTensor::download() const {
  const auto n = static_cast<std::size_t>(ref_.rows * ref_.cols);
  std::vector<float> values(n);
  if (n == 0) return values;
  const auto p = reinterpret_cast<CUdeviceptr>(ref_.data);
  if (ref_.dtype == ElemType::fp32) {
    FP8C_CU(runtime::driver().cuMemcpyDtoH(values.data(), p, n * 4));
    return values;
  }
  if (is_fp8(ref_.dtype)) {
    std::vector<std::uint8_t> codes(n);
    FP8C_CU(runtime::driver().cuMemcpyDtoH(codes.data(), p, n));
    for (std::size_t i = 0; i < n; ++i) values[i] = numerics::fp8_to_float(codes[i], ref_.dtype);
    return values;
  }
  std::vector<std::uint16_t> bits(n);
  FP8C_CU(runtime::driver().cuMemcpyDtoH(bits.data(), p, n * 2));
  for (std::size_t i = 0; i < n; ++i)
    values[i] = ref_.dtype == ElemType::bf16 ? numerics::bf16_to_float(bits[i])
                                             : numerics::fp16_to_float(bits[i]);
  return values;
}

}  // namespace fp8c
