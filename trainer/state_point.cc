#include "trainer/state_point.h"

#include <tuple>

namespace elastic::trainer {

bool operator<(const StatePoint& a, const StatePoint& b) {
  return std::tie(a.step, a.epoch, a.position) < std::tie(b.step, b.epoch, b.position);
}

bool operator==(const StatePoint& a, const StatePoint& b) {
  return a.step == b.step && a.epoch == b.epoch && a.position == b.position;
}

std::string ToString(const StatePoint& point) {
  return "epoch " + std::to_string(point.epoch + 1) + " position " +
         std::to_string(point.position) + " step " + std::to_string(point.step);
}

}  // namespace elastic::trainer
