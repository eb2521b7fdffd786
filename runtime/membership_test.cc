// Membership updates on the wire: whole ones, and the deltas a subscriber is
// sent after its snapshot (ids, plus the records that changed).
#include "runtime/membership.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace elastic::runtime {
namespace {

MemberInfo Record(uint64_t id, bool draining = false) {
  MemberInfo info;
  info.id = id;
  info.name = "worker-" + std::to_string(id);
  info.node_id = 100 + id % 3;
  info.endpoint = Endpoint{"10.0.0." + std::to_string(id), static_cast<uint16_t>(7000 + id)};
  info.pid = static_cast<int32_t>(4000 + id);
  info.draining = draining;
  return info;
}

MembershipUpdate Update(uint64_t generation, const std::vector<uint64_t>& view,
                        const std::vector<uint64_t>& pending, const std::set<uint64_t>& draining) {
  MembershipUpdate update;
  update.kind = MembershipEventKind::kViewChanged;
  update.member_id = 7;
  update.node_id = 3;
  update.detail = "why";
  update.view.generation = generation;
  for (uint64_t id : view) update.view.members.push_back(Record(id, draining.count(id) > 0));
  for (uint64_t id : pending) update.pending.push_back(Record(id, draining.count(id) > 0));
  return update;
}

std::vector<uint64_t> Ids(const std::vector<MemberInfo>& members) {
  std::vector<uint64_t> ids;
  for (const MemberInfo& member : members) ids.push_back(member.id);
  return ids;
}

void ExpectSame(const MembershipUpdate& got, const MembershipUpdate& want) {
  EXPECT_EQ(got.kind, want.kind);
  EXPECT_EQ(got.member_id, want.member_id);
  EXPECT_EQ(got.node_id, want.node_id);
  EXPECT_EQ(got.detail, want.detail);
  EXPECT_EQ(got.view.generation, want.view.generation);
  ASSERT_EQ(Ids(got.view.members), Ids(want.view.members));
  ASSERT_EQ(Ids(got.pending), Ids(want.pending));
  for (size_t i = 0; i < want.view.members.size(); ++i) {
    const MemberInfo& a = got.view.members[i];
    const MemberInfo& b = want.view.members[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.node_id, b.node_id);
    EXPECT_EQ(a.endpoint.ToString(), b.endpoint.ToString());
    EXPECT_EQ(a.pid, b.pid);
    EXPECT_EQ(a.draining, b.draining) << "member " << a.id;
  }
}

// Sends `update` whole (a snapshot) or as a delta carrying the records of
// `changed`; returns how many records the delta carried.
size_t Send(const MembershipUpdate& update, const std::set<uint64_t>* changed,
            MemberRecords& records, MembershipUpdate* read) {
  capnp::MallocMessageBuilder message;
  auto builder = message.initRoot<proto::MembershipUpdate>();
  if (changed == nullptr) {
    ToProto(update, builder);
  } else {
    ToProtoDelta(
        update, [&](const MemberInfo& record) { return changed->count(record.id) > 0; }, builder);
  }
  *read = records.Read(builder.asReader());
  return builder.asReader().hasDelta() ? builder.asReader().getDelta().getRecords().size() : 0;
}

TEST(MemberRecordsTest, DeltasAfterASnapshotReadAsTheWholeUpdates) {
  MemberRecords records;
  MembershipUpdate read;
  const MembershipUpdate snapshot = Update(5, {1, 2, 3, 4}, {6}, {});
  Send(snapshot, nullptr, records, &read);
  ExpectSame(read, snapshot);

  // A member fails: ids only, no record travels.
  const MembershipUpdate failed = Update(6, {1, 2, 4}, {6}, {});
  std::set<uint64_t> changed;
  EXPECT_EQ(Send(failed, &changed, records, &read), 0u);
  ExpectSame(read, failed);
  EXPECT_EQ(records.size(), 4u);  // member 3's record is dropped

  // One joins (new record), another's node drains (changed record), and the
  // view is reordered.
  const MembershipUpdate joined = Update(6, {4, 1, 2}, {6, 9}, {2});
  changed = {9, 2};
  EXPECT_EQ(Send(joined, &changed, records, &read), 2u);
  ExpectSame(read, joined);

  const MembershipUpdate published = Update(7, {4, 1, 2, 9, 6}, {}, {2});
  changed = {};
  EXPECT_EQ(Send(published, &changed, records, &read), 0u);
  ExpectSame(read, published);
  EXPECT_EQ(records.size(), 5u);

  // A later whole update (a GetMembership answer) replaces everything.
  const MembershipUpdate whole = Update(9, {11, 12}, {}, {});
  Send(whole, nullptr, records, &read);
  ExpectSame(read, whole);
  EXPECT_EQ(records.size(), 2u);
}

TEST(MemberRecordsTest, ADeltaNamingAMemberWithoutARecordIsRefusedNamingIt) {
  MemberRecords records;
  MembershipUpdate read;
  Send(Update(1, {1, 2}, {}, {}), nullptr, records, &read);
  const std::set<uint64_t> nothing;
  try {
    Send(Update(2, {1, 2, 3}, {}, {}), &nothing, records, &read);
    FAIL() << "a delta without member 3's record was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("member 3"), std::string::npos) << e.what();
  }
}

TEST(MemberRecordsTest, AWholeUpdateReaderRefusesADelta) {
  capnp::MallocMessageBuilder message;
  auto builder = message.initRoot<proto::MembershipUpdate>();
  ToProtoDelta(
      Update(1, {1}, {}, {}), [](const MemberInfo&) { return true; }, builder);
  EXPECT_THROW(FromProto(builder.asReader()), std::runtime_error);
}

// Who went away between two updates, told or not (a subscriber that was not
// listening in between: HeadSession).
TEST(MembersGoneBetweenTest, LiveMembersMissingAfterwards) {
  const MembershipUpdate before = Update(7, {1, 2, 3}, {4, 5}, {});
  // 4 admitted, 1 and 2 gone; 5 gone from pending, 6 new.
  const MembershipUpdate after = Update(9, {3, 4}, {6}, {});
  EXPECT_EQ(MembersGoneBetween(before, after), (std::vector<uint64_t>{1, 2, 5}));
  EXPECT_TRUE(MembersGoneBetween(after, after).empty());
  EXPECT_TRUE(MembersGoneBetween(MembershipUpdate{}, after).empty());
}

}  // namespace
}  // namespace elastic::runtime
