// parse_launch_env: torchrun's variables, with errors that name the variable.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "collectives/launch_env.hpp"

namespace fp8c::collectives::testing {
namespace {

using ::testing::HasSubstr;

using Env = std::map<std::string, std::string, std::less<>>;

EnvLookup lookup_in(const Env& env) {
  return [&env](std::string_view name) -> std::optional<std::string> {
    const auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

Env torchrun_env() {
  return {{"RANK", "3"},
          {"WORLD_SIZE", "8"},
          {"LOCAL_RANK", "3"},
          {"MASTER_ADDR", "10.0.0.1"},
          {"MASTER_PORT", "29500"}};
}

std::string error_for(const Env& env) {
  try {
    parse_launch_env(lookup_in(env));
  } catch (const LaunchEnvError& error) {
    return error.what();
  }
  return "no error";
}

TEST(LaunchEnvTest, ParsesTorchrunEnvironment) {
  const Env env = torchrun_env();
  const LaunchEnv parsed = parse_launch_env(lookup_in(env));
  EXPECT_EQ(parsed.rank, 3);
  EXPECT_EQ(parsed.world_size, 8);
  EXPECT_EQ(parsed.local_rank, 3);
  EXPECT_EQ(parsed.master_addr, "10.0.0.1");
  EXPECT_EQ(parsed.master_port, 29500);
}

TEST(LaunchEnvTest, EveryVariableIsRequired) {
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}) {
    Env env = torchrun_env();
    env.erase(name);
    EXPECT_THAT(error_for(env), HasSubstr(std::string(name) + " is not set")) << name;
  }
}

TEST(LaunchEnvTest, MalformedValuesAreRefusedWithTheirName) {
  const auto with = [](const std::string& name, const std::string& value) {
    Env env = torchrun_env();
    env[name] = value;
    return error_for(env);
  };
  EXPECT_THAT(with("RANK", "abc"), HasSubstr("RANK='abc' is not a non-negative decimal integer"));
  EXPECT_THAT(with("RANK", "-1"), HasSubstr("RANK='-1' is not a non-negative"));
  EXPECT_THAT(with("RANK", " 1"), HasSubstr("RANK=' 1'"));
  EXPECT_THAT(with("RANK", ""), HasSubstr("RANK='' is empty"));
  EXPECT_THAT(with("RANK", "8"),
              HasSubstr("RANK='8' is out of range; expected 0..7 (WORLD_SIZE=8)"));
  EXPECT_THAT(with("LOCAL_RANK", "9"), HasSubstr("LOCAL_RANK='9' is out of range"));
  EXPECT_THAT(with("WORLD_SIZE", "0"), HasSubstr("WORLD_SIZE='0' is out of range"));
  EXPECT_THAT(with("WORLD_SIZE", "99999999999999999999"), HasSubstr("out of range"));
  EXPECT_THAT(with("MASTER_PORT", "0"),
              HasSubstr("MASTER_PORT='0' is out of range; expected 1..65535"));
  EXPECT_THAT(with("MASTER_PORT", "65536"), HasSubstr("MASTER_PORT='65536'"));
  EXPECT_THAT(with("MASTER_PORT", "29500x"), HasSubstr("not a non-negative decimal integer"));
  EXPECT_THAT(with("MASTER_ADDR", ""), HasSubstr("MASTER_ADDR is empty"));
}

}  // namespace
}  // namespace fp8c::collectives::testing
