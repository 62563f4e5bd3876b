// The two views of one offload tier (core/src/train/expert_split_offload.h) over a recording fake
// engine: extents apart by prefix, and a view's wait_all() waits on its own requests alone, so a
// failure of the other view's request stays that view's to see.
#include "train/expert_split_offload.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace keel {
namespace {

// Requests complete at once; a request on an extent named "...fail" fails.
struct FakeEngine {
  std::vector<std::string> extents;
  std::map<uint64_t, keel_status> pending;  // ticket -> the status its wait returns once
  uint64_t next = 1;
};

FakeEngine& engine(void* e) { return *static_cast<FakeEngine*>(e); }
keel_status add_extent(void* e, const char* name, uint64_t) {
  engine(e).extents.push_back(name);
  return KEEL_OK;
}
keel_status submit(void* e, const char* name, uint64_t* ticket) {
  *ticket = engine(e).next++;
  const std::string n = name;
  engine(e).pending[*ticket] = n.size() >= 4 && n.compare(n.size() - 4, 4, "fail") == 0 ? KEEL_ERR_IO : KEEL_OK;
  return KEEL_OK;
}
keel_status submit_write(void* e, const char* name, uint64_t, const void*, uint64_t, uint64_t* ticket) {
  return submit(e, name, ticket);
}
keel_status submit_read(void* e, const char* name, uint64_t, void*, uint64_t, uint64_t* ticket) {
  return submit(e, name, ticket);
}
keel_status wait(void* e, uint64_t ticket) {
  auto it = engine(e).pending.find(ticket);
  if (it == engine(e).pending.end()) return KEEL_OK;  // waited before
  const keel_status status = it->second;
  engine(e).pending.erase(it);
  return status;
}

keel_offload_api fake_table() {
  keel_offload_api t{};
  t.struct_size = sizeof(t);
  t.add_extent = &add_extent;
  t.submit_write = &submit_write;
  t.submit_read = &submit_read;
  t.wait = &wait;
  return t;
}

TEST(ExpertSplitOffload, ViewsKeepNamesAndFailuresApart) {
  const keel_offload_api api = fake_table();
  FakeEngine fake;
  SharedTier shared(&api, &fake);
  void* dense = shared.view("");
  void* experts = shared.view("experts.");
  const keel_offload_api* view = SharedTier::table();
  ASSERT_EQ(view->add_extent(dense, "param.3", 64), KEEL_OK);
  ASSERT_EQ(view->add_extent(experts, "param.3", 64), KEEL_OK);
  EXPECT_EQ(fake.extents, (std::vector<std::string>{"param.3", "experts.param.3"}));

  uint64_t failing = 0, fine = 0;
  ASSERT_EQ(view->submit_write(dense, "state.fail", 0, nullptr, 64, &failing), KEEL_OK);
  ASSERT_EQ(view->submit_read(experts, "param.3", 0, nullptr, 64, &fine), KEEL_OK);
  // The expert half's wait_all sees its own request only: the dense half's failure is not taken.
  EXPECT_EQ(view->wait_all(experts), KEEL_OK);
  EXPECT_EQ(fake.pending.count(fine), 0u);
  EXPECT_EQ(fake.pending.count(failing), 1u);
  EXPECT_EQ(view->wait_all(dense), KEEL_ERR_IO);
  EXPECT_TRUE(fake.pending.empty());
  // Nothing left in flight: a second wait_all has nothing to report.
  EXPECT_EQ(view->wait_all(dense), KEEL_OK);
}

}  // namespace
}  // namespace keel
