// Overloaded{lambdas...}: one visitor for std::visit over a variant (the
// typed plan steps, the lowered actions), each alternative its own lambda.
#pragma once

namespace fp8c {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace fp8c
