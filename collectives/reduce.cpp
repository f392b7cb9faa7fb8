#include "collectives/reduce.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "collectives/narrow_float.hpp"

namespace fp8c::collectives {
namespace {

// Unaligned-safe element access: host buffers handed to a collective need not
// be aligned to the element size.
template <typename T>
T load(const void* base, std::size_t index) {
  T value;
  std::memcpy(&value, static_cast<const std::byte*>(base) + index * sizeof(T), sizeof(T));
  return value;
}

template <typename T>
void store(void* base, std::size_t index, T value) {
  std::memcpy(static_cast<std::byte*>(base) + index * sizeof(T), &value, sizeof(T));
}

// Sum where Storage is widened to Accumulator, added in rank order, and
// narrowed once at the end.
template <typename Storage, typename Accumulator, typename Widen, typename Narrow>
void sum_in_rank_order(std::span<const void* const> inputs, void* out, std::size_t count,
                       Widen widen, Narrow narrow) {
  for (std::size_t i = 0; i < count; ++i) {
    Accumulator total = widen(load<Storage>(inputs[0], i));
    for (std::size_t rank = 1; rank < inputs.size(); ++rank) {
      total = total + widen(load<Storage>(inputs[rank], i));
    }
    store<Storage>(out, i, narrow(total));
  }
}

// Max that selects one input's bits: Compare is the type values are ordered
// in (float for 16-bit floats). NaN wins, then the larger, earliest on ties.
template <typename Storage, typename Compare, typename ToCompare>
void max_in_rank_order(std::span<const void* const> inputs, void* out, std::size_t count,
                       ToCompare to_compare) {
  for (std::size_t i = 0; i < count; ++i) {
    Storage best = load<Storage>(inputs[0], i);
    Compare best_value = to_compare(best);
    for (std::size_t rank = 1; rank < inputs.size(); ++rank) {
      if constexpr (std::is_floating_point_v<Compare>) {
        if (std::isnan(best_value)) break;
      }
      const Storage candidate = load<Storage>(inputs[rank], i);
      const Compare candidate_value = to_compare(candidate);
      bool take = candidate_value > best_value;
      if constexpr (std::is_floating_point_v<Compare>) take = take || std::isnan(candidate_value);
      if (take) {
        best = candidate;
        best_value = candidate_value;
      }
    }
    store<Storage>(out, i, best);
  }
}

template <typename T>
T identity(T value) {
  return value;
}

void sum(std::span<const void* const> inputs, void* out, std::size_t count, ElemType dtype) {
  switch (dtype) {
    case ElemType::fp32:
      return sum_in_rank_order<float, float>(inputs, out, count, identity<float>, identity<float>);
    case ElemType::fp64:
      return sum_in_rank_order<double, double>(inputs, out, count, identity<double>,
                                               identity<double>);
    case ElemType::bf16:
      return sum_in_rank_order<std::uint16_t, float>(inputs, out, count, bfloat16_to_float,
                                                     float_to_bfloat16_rne);
    case ElemType::fp16:
      return sum_in_rank_order<std::uint16_t, float>(inputs, out, count, float16_to_float,
                                                     float_to_float16_rne);
    case ElemType::i32:
      // Unsigned arithmetic: wraps like the GPU instead of signed-overflow UB.
      return sum_in_rank_order<std::uint32_t, std::uint32_t>(
          inputs, out, count, identity<std::uint32_t>, identity<std::uint32_t>);
    case ElemType::u8:
      return sum_in_rank_order<std::uint8_t, std::uint32_t>(
          inputs, out, count, [](std::uint8_t v) { return std::uint32_t{v}; },
          [](std::uint32_t v) { return static_cast<std::uint8_t>(v); });
    case ElemType::e4m3:
    case ElemType::e5m2:
    case ElemType::e8m0:
      break;
  }
  throw std::invalid_argument("reduce_in_rank_order: cannot sum " + std::string(to_string(dtype)));
}

void max(std::span<const void* const> inputs, void* out, std::size_t count, ElemType dtype) {
  switch (dtype) {
    case ElemType::fp32:
      return max_in_rank_order<float, float>(inputs, out, count, identity<float>);
    case ElemType::fp64:
      return max_in_rank_order<double, double>(inputs, out, count, identity<double>);
    case ElemType::bf16:
      return max_in_rank_order<std::uint16_t, float>(inputs, out, count, bfloat16_to_float);
    case ElemType::fp16:
      return max_in_rank_order<std::uint16_t, float>(inputs, out, count, float16_to_float);
    case ElemType::i32:
      return max_in_rank_order<std::int32_t, std::int32_t>(inputs, out, count,
                                                           identity<std::int32_t>);
    case ElemType::u8:
      return max_in_rank_order<std::uint8_t, std::uint8_t>(inputs, out, count,
                                                           identity<std::uint8_t>);
    case ElemType::e4m3:
    case ElemType::e5m2:
    case ElemType::e8m0:
      break;
  }
  throw std::invalid_argument("reduce_in_rank_order: cannot take the max of " +
                              std::string(to_string(dtype)));
}

}  // namespace

void reduce_in_rank_order(std::span<const void* const> inputs, void* out, std::size_t count,
                          ElemType dtype, ReduceOp op) {
  if (inputs.empty()) throw std::invalid_argument("reduce_in_rank_order: no inputs");
  if (!is_reducible(dtype)) {
    throw std::invalid_argument("reduce_in_rank_order: " + std::string(to_string(dtype)) +
                                " is never reduced");
  }
  if (count == 0) return;
  if (inputs.size() == 1) {
    if (out != inputs[0]) std::memcpy(out, inputs[0], count * element_bytes(dtype));
    return;
  }
  switch (op) {
    case ReduceOp::kSum:
      return sum(inputs, out, count, dtype);
    case ReduceOp::kMax:
      return max(inputs, out, count, dtype);
  }
  throw std::invalid_argument("reduce_in_rank_order: invalid reduction op");
}

}  // namespace fp8c::collectives
