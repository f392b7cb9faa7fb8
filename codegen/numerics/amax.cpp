#include "codegen/numerics/amax.hpp"

#include <stdexcept>

namespace fp8c::numerics {

float amax(std::span<const float> values) {
  float result = 0.0f;
  for (const float x : values) result = amax_combine(result, magnitude(x));
  return result;
}

std::vector<float> block_amax(std::span<const float> matrix, std::size_t rows, std::size_t cols,
                              BlockShape block) {
  if (block.rows == 0 || block.cols == 0) {
    throw std::invalid_argument("block_amax: a block must have at least one row and column");
  }
  if (matrix.size() != rows * cols) {
    throw std::invalid_argument("block_amax: matrix size does not match rows * cols");
  }
  const std::size_t grid_rows = (rows + block.rows - 1) / block.rows;
  const std::size_t grid_cols = (cols + block.cols - 1) / block.cols;
  std::vector<float> result(grid_rows * grid_cols, 0.0f);
  for (std::size_t r = 0; r < rows; ++r) {
    float* grid_row = result.data() + (r / block.rows) * grid_cols;
    const float* row = matrix.data() + r * cols;
    for (std::size_t c = 0; c < cols; ++c) {
      float& slot = grid_row[c / block.cols];
      slot = amax_combine(slot, magnitude(row[c]));
    }
  }
  return result;
}

float amax_from_history(std::span<const float> history, AmaxHistoryRule rule) {
  if (history.empty()) return 0.0f;
  if (rule == AmaxHistoryRule::most_recent) return history.front();
  return amax(history);
}

}  // namespace fp8c::numerics
