#include "runtime/membership.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cstring>
#include <set>
#include <stdexcept>

namespace elastic::runtime {
namespace {

using ProtoKind = proto::MembershipEvent::Kind;

ProtoKind KindToProto(MembershipEventKind kind) {
  switch (kind) {
    case MembershipEventKind::kJoined:
      return ProtoKind::JOINED;
    case MembershipEventKind::kLeft:
      return ProtoKind::LEFT;
    case MembershipEventKind::kFailed:
      return ProtoKind::FAILED;
    case MembershipEventKind::kDraining:
      return ProtoKind::DRAINING;
    case MembershipEventKind::kExited:
      return ProtoKind::EXITED;
    case MembershipEventKind::kViewChanged:
      return ProtoKind::VIEW_CHANGED;
    case MembershipEventKind::kSnapshot:
      return ProtoKind::SNAPSHOT;
  }
  return ProtoKind::SNAPSHOT;
}

MembershipEventKind KindFromProto(ProtoKind kind) {
  switch (kind) {
    case ProtoKind::JOINED:
      return MembershipEventKind::kJoined;
    case ProtoKind::LEFT:
      return MembershipEventKind::kLeft;
    case ProtoKind::FAILED:
      return MembershipEventKind::kFailed;
    case ProtoKind::DRAINING:
      return MembershipEventKind::kDraining;
    case ProtoKind::EXITED:
      return MembershipEventKind::kExited;
    case ProtoKind::VIEW_CHANGED:
      return MembershipEventKind::kViewChanged;
    case ProtoKind::SNAPSHOT:
      return MembershipEventKind::kSnapshot;
  }
  return MembershipEventKind::kSnapshot;
}

}  // namespace

int MembershipView::RankOf(uint64_t member_id) const {
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].id == member_id) return static_cast<int>(i);
  }
  return -1;
}

std::vector<uint64_t> MembersGoneBetween(const MembershipUpdate& before,
                                         const MembershipUpdate& after) {
  std::set<uint64_t> live;
  for (const MemberInfo& m : after.view.members) live.insert(m.id);
  for (const MemberInfo& m : after.pending) live.insert(m.id);
  std::vector<uint64_t> gone;
  for (const auto* list : {&before.view.members, &before.pending})
    for (const MemberInfo& m : *list)
      if (live.count(m.id) == 0) gone.push_back(m.id);
  return gone;
}

const char* ToString(MembershipEventKind kind) {
  switch (kind) {
    case MembershipEventKind::kJoined:
      return "joined";
    case MembershipEventKind::kLeft:
      return "left";
    case MembershipEventKind::kFailed:
      return "failed";
    case MembershipEventKind::kDraining:
      return "draining";
    case MembershipEventKind::kExited:
      return "exited";
    case MembershipEventKind::kViewChanged:
      return "view-changed";
    case MembershipEventKind::kSnapshot:
      return "snapshot";
  }
  return "?";
}

Endpoint FromProto(proto::Endpoint::Reader endpoint) {
  return Endpoint{endpoint.getHost().cStr(), endpoint.getPort()};
}

void ToProto(const Endpoint& endpoint, proto::Endpoint::Builder builder) {
  builder.setHost(endpoint.host);
  builder.setPort(endpoint.port);
}

MemberInfo FromProto(proto::Member::Reader member) {
  MemberInfo info;
  info.id = member.getId();
  info.name = member.getName().cStr();
  info.node_id = member.getNodeId();
  info.endpoint = FromProto(member.getEndpoint());
  info.pid = member.getPid();
  info.draining = member.getDraining();
  return info;
}

void ToProto(const MemberInfo& member, proto::Member::Builder builder) {
  builder.setId(member.id);
  builder.setName(member.name);
  builder.setNodeId(member.node_id);
  ToProto(member.endpoint, builder.initEndpoint());
  builder.setPid(member.pid);
  builder.setDraining(member.draining);
}

namespace {

// The event and the generation: what a whole update and a delta share.
MembershipUpdate EventFromProto(proto::MembershipUpdate::Reader update) {
  MembershipUpdate result;
  auto event = update.getEvent();
  result.kind = KindFromProto(event.getKind());
  result.member_id = event.getMemberId();
  result.node_id = event.getNodeId();
  result.detail = event.getDetail().cStr();
  result.view.generation = update.getView().getGeneration();
  return result;
}

proto::MembershipView::Builder EventToProto(const MembershipUpdate& update,
                                            proto::MembershipUpdate::Builder builder) {
  auto event = builder.initEvent();
  event.setKind(KindToProto(update.kind));
  event.setMemberId(update.member_id);
  event.setNodeId(update.node_id);
  event.setDetail(update.detail);
  auto view = builder.initView();
  view.setGeneration(update.view.generation);
  return view;
}

}  // namespace

MembershipUpdate FromProto(proto::MembershipUpdate::Reader update) {
  if (update.hasDelta()) {
    throw std::runtime_error("a membership delta names members by id: read it with MemberRecords");
  }
  MembershipUpdate result = EventFromProto(update);
  for (auto member : update.getView().getMembers())
    result.view.members.push_back(FromProto(member));
  for (auto member : update.getPending()) result.pending.push_back(FromProto(member));
  return result;
}

void ToProto(const MembershipUpdate& update, proto::MembershipUpdate::Builder builder) {
  auto view = EventToProto(update, builder);
  auto members = view.initMembers(static_cast<unsigned>(update.view.members.size()));
  for (size_t i = 0; i < update.view.members.size(); ++i) {
    ToProto(update.view.members[i], members[static_cast<unsigned>(i)]);
  }
  auto pending = builder.initPending(static_cast<unsigned>(update.pending.size()));
  for (size_t i = 0; i < update.pending.size(); ++i) {
    ToProto(update.pending[i], pending[static_cast<unsigned>(i)]);
  }
}

void ToProtoDelta(const MembershipUpdate& update,
                  const std::function<bool(const MemberInfo&)>& changed,
                  proto::MembershipUpdate::Builder builder) {
  EventToProto(update, builder);
  auto delta = builder.initDelta();
  std::vector<const MemberInfo*> records;
  auto ids_of = [&](const std::vector<MemberInfo>& members, capnp::List<uint64_t>::Builder ids) {
    for (size_t i = 0; i < members.size(); ++i) {
      ids.set(static_cast<unsigned>(i), members[i].id);
      if (changed(members[i])) records.push_back(&members[i]);
    }
  };
  ids_of(update.view.members, delta.initViewIds(static_cast<unsigned>(update.view.members.size())));
  ids_of(update.pending, delta.initPendingIds(static_cast<unsigned>(update.pending.size())));
  auto out = delta.initRecords(static_cast<unsigned>(records.size()));
  for (size_t i = 0; i < records.size(); ++i) ToProto(*records[i], out[static_cast<unsigned>(i)]);
}

MembershipUpdate MemberRecords::Read(proto::MembershipUpdate::Reader update) {
  if (!update.hasDelta()) {
    MembershipUpdate whole = FromProto(update);
    records_.clear();
    KeepOnly(whole);
    return whole;
  }
  auto delta = update.getDelta();
  for (auto record : delta.getRecords()) {
    MemberInfo info = FromProto(record);
    records_[info.id] = std::move(info);
  }
  MembershipUpdate result = EventFromProto(update);
  auto named = [this](capnp::List<uint64_t>::Reader ids, std::vector<MemberInfo>* members) {
    members->reserve(ids.size());
    for (uint64_t id : ids) {
      auto it = records_.find(id);
      if (it == records_.end()) {
        throw std::runtime_error("membership delta names member " + std::to_string(id) +
                                 ", of which no record was received");
      }
      members->push_back(it->second);
    }
  };
  named(delta.getViewIds(), &result.view.members);
  named(delta.getPendingIds(), &result.pending);
  KeepOnly(result);
  return result;
}

void MemberRecords::KeepOnly(const MembershipUpdate& update) {
  const size_t named = update.view.members.size() + update.pending.size();
  // Every id named has a record here and no id is named twice: equal sizes
  // mean nothing else is held, the usual case, checked in O(1).
  if (records_.size() == named) return;
  std::unordered_map<uint64_t, MemberInfo> kept;
  kept.reserve(named);
  for (const auto* members : {&update.view.members, &update.pending}) {
    for (const MemberInfo& member : *members) {
      auto it = records_.find(member.id);
      kept.emplace(member.id, it != records_.end() ? std::move(it->second) : member);
    }
  }
  records_ = std::move(kept);
}

std::string EncodeMembershipUpdate(const MembershipUpdate& update) {
  capnp::MallocMessageBuilder message;
  ToProto(update, message.initRoot<proto::MembershipUpdate>());
  auto words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

MembershipUpdate DecodeMembershipUpdate(const std::string& bytes) {
  if (bytes.size() % sizeof(capnp::word) != 0 || bytes.empty()) {
    throw std::runtime_error("not an encoded membership update (size " +
                             std::to_string(bytes.size()) + ")");
  }
  auto words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  try {
    capnp::FlatArrayMessageReader reader(words);
    return FromProto(reader.getRoot<proto::MembershipUpdate>());
  } catch (const kj::Exception& e) {
    throw std::runtime_error("not an encoded membership update: " +
                             std::string(e.getDescription().cStr()));
  }
}

}  // namespace elastic::runtime
