// keel_support::testing::check_offload_engine, the installed conformance check, run through the C
// tables of the built-in "cpu" and "nvme" engines and of the worked example "files"
// (examples/plugins/offload-files, built here from its sources): each must keep every promise
// of keel/offload.h the check knows.
#include <gtest/gtest.h>
#include <keel/offload.h>
#include <keel/plugin.h>
#include <keel_support/offload/testing/offload_conformance.hpp>

#include <string>

#include "offload_test_support.hpp"
#include "plugin_test_support.hpp"

namespace {

using keel_test::LoadedPlugin;

void expect_conformant(const char* library, const char* name, const std::string& config) {
  LoadedPlugin plugin(library, KEEL_KIND_OFFLOAD, name);
  for (const std::string& broken :
       keel_support::testing::check_offload_engine(plugin.api<keel_offload_api>(), config.c_str()))
    ADD_FAILURE() << name << ": " << broken;
}

TEST(EngineConformance, Cpu) { expect_conformant(KEEL_OFFLOAD_PLUGIN_PATH, "cpu", R"({"capacity_bytes": 1048576})"); }

TEST(EngineConformance, Nvme) {
  offload_test::ScratchFolder folder;
  offload_test::require_direct_io(folder.path());
  if (HasFatalFailure()) return;
  expect_conformant(KEEL_OFFLOAD_PLUGIN_PATH, "nvme",
                    R"({"path": ")" + folder.path() + R"(", "capacity_bytes": 1048576, "block_bytes": 4096})");
}

TEST(EngineConformance, ExampleFiles) {
  offload_test::ScratchFolder folder;
  expect_conformant(KEEL_EXAMPLE_OFFLOAD_PLUGIN_PATH, "files",
                    R"({"path": ")" + folder.path() + R"(", "capacity_bytes": 1048576})");
}

}  // namespace
