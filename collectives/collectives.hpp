// Everything a user of fp8c's collectives needs, in one include.
#pragma once

#include "collectives/collective_error.hpp"
#include "collectives/communicator.hpp"
#include "collectives/dtype.hpp"
#include "collectives/gloo_communicator.hpp"
#include "collectives/in_process_group.hpp"
#include "collectives/launch_env.hpp"
#include "collectives/rank_threads.hpp"
#include "collectives/reduce.hpp"
#include "collectives/run_ranks.hpp"
#include "collectives/segments.hpp"
