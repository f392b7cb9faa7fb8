// Which ranks of an in-process group already have their communicator. A
// group hands each rank out once: two handles on one rank would share its
// slot in the group's rendezvous and corrupt it. Used by the CPU group
// (in_process_group.hpp) and the single-GPU device group
// (device/local_device_group.hpp).
#pragma once

#include <mutex>
#include <string>
#include <vector>

namespace fp8c::collectives {

class RankClaims {
 public:
  // `group` names the group in errors ("InProcessGroup", ...).
  RankClaims(std::string group, int size);

  // Marks `rank` as handed out. Throws std::invalid_argument when it is not
  // a rank of the group or was handed out before. Thread-safe.
  void claim(int rank);

 private:
  std::string group_;
  std::mutex mutex_;
  std::vector<bool> claimed_;
};

}  // namespace fp8c::collectives
