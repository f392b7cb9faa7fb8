// Per-rank input bytes for every reducible dtype, and the expected result of
// reducing them, computed with the independent references.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "collectives/dtype.hpp"
#include "serial_reference.hpp"
#include "test_support.hpp"

namespace fp8c::collectives::testing {

using Bytes = std::vector<std::byte>;

template <typename T>
T element(const Bytes& bytes, std::size_t index) {
  T value;
  std::memcpy(&value, bytes.data() + index * sizeof(T), sizeof(T));
  return value;
}

template <typename T>
void set_element(Bytes& bytes, std::size_t index, T value) {
  std::memcpy(bytes.data() + index * sizeof(T), &value, sizeof(T));
}

// `count` elements for `rank`. With `specials`, the first elements hold NaN
// on the last rank, +0/-0 pairs and equal values, which only max can take
// without changing its bits (sums would re-encode NaN payloads).
inline Bytes rank_input(ElemType dtype, int rank, int size, std::size_t count, bool specials,
                        std::uint32_t salt = 0) {
  Bytes bytes(count * element_bytes(dtype));
  const std::vector<float> floats = rank_floats(rank, count, salt);
  std::mt19937 engine(99u + static_cast<std::uint32_t>(rank) * 31u + salt);
  for (std::size_t i = 0; i < count; ++i) {
    switch (dtype) {
      case ElemType::fp32:
        set_element<float>(bytes, i, floats[i]);
        break;
      case ElemType::fp64:
        set_element<double>(bytes, i, double{floats[i]} + std::ldexp(double{floats[i]}, -30));
        break;
      case ElemType::bf16:
        set_element<std::uint16_t>(bytes, i, reference_float_to_bf16(floats[i]));
        break;
      case ElemType::fp16:
        set_element<std::uint16_t>(bytes, i, reference_float_to_fp16(floats[i]));
        break;
      case ElemType::i32:
        set_element<std::uint32_t>(bytes, i, static_cast<std::uint32_t>(engine()));
        break;
      case ElemType::u8:
      case ElemType::e4m3:
      case ElemType::e5m2:
      case ElemType::e8m0:
        set_element<std::uint8_t>(bytes, i, static_cast<std::uint8_t>(engine()));
        break;
    }
  }
  if (!specials || count < 3) return bytes;
  const bool last = rank == size - 1;
  switch (dtype) {
    case ElemType::fp32:
      if (last) set_element<float>(bytes, 0, std::numeric_limits<float>::quiet_NaN());
      set_element<float>(bytes, 1, rank % 2 == 0 ? 0.0f : -0.0f);
      set_element<float>(bytes, 2, 3.5f);
      break;
    case ElemType::fp64:
      if (last) set_element<double>(bytes, 0, -std::numeric_limits<double>::quiet_NaN());
      set_element<double>(bytes, 1, rank % 2 == 0 ? -0.0 : 0.0);
      set_element<double>(bytes, 2, 3.5);
      break;
    case ElemType::bf16:
      if (last) set_element<std::uint16_t>(bytes, 0, 0x7FC1);  // NaN with a payload
      set_element<std::uint16_t>(bytes, 1, rank % 2 == 0 ? 0x8000 : 0x0000);
      set_element<std::uint16_t>(bytes, 2, 0x4060);  // 3.5
      break;
    case ElemType::fp16:
      if (last) set_element<std::uint16_t>(bytes, 0, 0xFE01);  // negative NaN with a payload
      set_element<std::uint16_t>(bytes, 1, rank % 2 == 0 ? 0x0000 : 0x8000);
      set_element<std::uint16_t>(bytes, 2, 0x4300);  // 3.5
      break;
    default:
      break;
  }
  return bytes;
}

inline double widen_for_compare(ElemType dtype, const Bytes& bytes, std::size_t i) {
  switch (dtype) {
    case ElemType::fp32:
      return element<float>(bytes, i);
    case ElemType::fp64:
      return element<double>(bytes, i);
    case ElemType::bf16:
      return reference_bf16_to_float(element<std::uint16_t>(bytes, i));
    case ElemType::fp16:
      return reference_fp16_to_float(element<std::uint16_t>(bytes, i));
    case ElemType::i32:
      return element<std::int32_t>(bytes, i);
    default:
      return element<std::uint8_t>(bytes, i);
  }
}

// Expected reduction of elements [offset, offset + count) of every rank's
// input, in rank order.
inline Bytes expected_reduction(ElemType dtype, ReduceOp op, const std::vector<Bytes>& inputs,
                                std::size_t offset, std::size_t count) {
  const std::size_t width = element_bytes(dtype);
  Bytes out(count * width);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t at = offset + i;
    if (op == ReduceOp::kMax || inputs.size() == 1) {
      std::vector<double> values;
      for (const Bytes& input : inputs) values.push_back(widen_for_compare(dtype, input, at));
      const auto winner = static_cast<std::size_t>(reference_max_winner(values));
      const std::size_t source = op == ReduceOp::kMax ? winner : 0;
      std::memcpy(out.data() + i * width, inputs[source].data() + at * width, width);
      continue;
    }
    switch (dtype) {
      case ElemType::fp32: {
        float total = element<float>(inputs[0], at);
        for (std::size_t r = 1; r < inputs.size(); ++r) total += element<float>(inputs[r], at);
        set_element<float>(out, i, total);
        break;
      }
      case ElemType::fp64: {
        double total = element<double>(inputs[0], at);
        for (std::size_t r = 1; r < inputs.size(); ++r) total += element<double>(inputs[r], at);
        set_element<double>(out, i, total);
        break;
      }
      case ElemType::bf16: {
        float total = reference_bf16_to_float(element<std::uint16_t>(inputs[0], at));
        for (std::size_t r = 1; r < inputs.size(); ++r) {
          total += reference_bf16_to_float(element<std::uint16_t>(inputs[r], at));
        }
        set_element<std::uint16_t>(out, i, reference_float_to_bf16(total));
        break;
      }
      case ElemType::fp16: {
        float total = reference_fp16_to_float(element<std::uint16_t>(inputs[0], at));
        for (std::size_t r = 1; r < inputs.size(); ++r) {
          total += reference_fp16_to_float(element<std::uint16_t>(inputs[r], at));
        }
        set_element<std::uint16_t>(out, i, reference_float_to_fp16(total));
        break;
      }
      case ElemType::i32: {
        std::uint32_t total = 0;
        for (const Bytes& input : inputs) total += element<std::uint32_t>(input, at);
        set_element<std::uint32_t>(out, i, total);
        break;
      }
      default: {
        std::uint8_t total = 0;
        for (const Bytes& input : inputs) {
          total = static_cast<std::uint8_t>(total + element<std::uint8_t>(input, at));
        }
        set_element<std::uint8_t>(out, i, total);
        break;
      }
    }
  }
  return out;
}

inline const std::vector<ElemType>& reducible_dtypes() {
  static const std::vector<ElemType> dtypes = {ElemType::fp32, ElemType::bf16, ElemType::fp16,
                                               ElemType::fp64, ElemType::i32,  ElemType::u8};
  return dtypes;
}

}  // namespace fp8c::collectives::testing
