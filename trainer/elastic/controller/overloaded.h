// A visitor from one lambda per alternative, for std::visit over the
// controller's variants (Event, Action, Notice): with no generic (auto) lambda
// among them, an alternative without its lambda fails to compile instead of
// being dropped.
#pragma once

namespace elastic::trainer {

template <typename... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <typename... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace elastic::trainer
