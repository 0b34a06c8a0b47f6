// RankRun for grouped transports (capabilities().grouped: NCCL): a rank's sends and receives of one
// round on such a transport are posted together, between one BeginGroup and EndGroup, once all of
// them are ready, and rounds go out in ascending order. Why: NCCL matches by issue order and runs
// each group's ops together; when every rank issues round r as one group, on every link both ends
// hold the same messages in the same group (the plan puts a Send and its Recv in the same round),
// so every group completes (transports/nccl/nccl_transport.h gives the full argument). Splitting
// a round could leave one end's group waiting for ops the other end holds back, so a round is
// never cut by executor.max_in_flight, and a plan in which a network op waits on a network op of
// its own or a later round cannot run round by round and is refused before anything is posted.
#include "core/runtime/rank_run.h"

#include <algorithm>
#include <climits>
#include <unordered_map>

namespace ferry {

bool RankRun::Grouped(int i) const {
  return transport_of_[i] != nullptr && transport_of_[i]->capabilities().grouped;
}

// The earliest round of the network ops that op i waits on, directly or through local ops (a
// Send's Pack); INT32_MAX when none.
int RankRun::NetworkDepRound(int i) const {
  int earliest = INT32_MAX;
  for (int dep : plan_.Deps(OpAt(i))) {
    const int d = local_.at(dep);
    const Op& op = OpAt(d);
    earliest = std::min(earliest, IsMessageKind(op.kind) ? op.round : NetworkDepRound(d));
  }
  return earliest;
}

// Every message of the plan has its Send (or Forward) and its Recv in one round: both ends post it
// in the same group. The planner guarantees it (planner/emit.cc gives a Recv its sender's round);
// a hand-made plan may not, and every rank then refuses it alike (each holds the whole plan).
Status RankRun::CheckMessageRounds() const {
  std::unordered_map<int64_t, std::pair<int, int>> rounds;  // message -> (send round, recv round)
  for (const Op& op : plan_.ops) {
    if (!IsMessageKind(op.kind)) continue;
    auto& [send, recv] = rounds.try_emplace(op.message, -1, -1).first->second;
    (op.kind == OpKind::kRecv ? recv : send) = op.round;
  }
  for (const auto& [message, ends] : rounds) {
    if (ends.first != ends.second) {
      return InvalidArgument("message " + std::to_string(message) + " is sent in round " +
                             std::to_string(ends.first) + " and received in round " +
                             std::to_string(ends.second) + "; a grouped transport posts both ends "
                             "in one group and needs one round");
    }
  }
  return Status::Ok();
}

// Counts, per grouped transport and round, the network ops still to become ready, and refuses
// what cannot run round by round: direct reads and bounced CUDA data over a grouped transport,
// messages whose ends lie in different rounds, and network ops that wait on network ops of their
// own or a later round. Staging is granted a round at a time (GrantRound), and local ops do not
// take staging ahead of the rounds still to post (AheadOfGroupedRounds).
Status RankRun::CountGroupedRounds() {
  bool any = false;
  for (int i = 0; i < n_ && !any; ++i) any = Grouped(i);
  if (any) FERRY_RETURN_IF_ERROR(CheckMessageRounds());
  for (int i = 0; i < n_; ++i) {
    if (!Grouped(i)) continue;
    const Op& op = OpAt(i);
    const std::string transport(transport_of_[i]->name());
    if (roles_.role[i] != DirectRole::kStaged) {
      return InvalidArgument(Describe(i) + ": direct reads over the grouped transport " + transport +
                             "; set executor.direct_intra_node=false");
    }
    if (bounce_of_[i] >= 0) {
      return Unimplemented(Describe(i) + ": " + transport + " needs CUDA data staged, which a "
                           "grouped transport cannot post round by round");
    }
    for (int dep : plan_.Deps(op)) {
      const int d = local_.at(dep);
      if (OpAt(d).round > op.round) {
        return InvalidArgument(Describe(i) + " (round " + std::to_string(op.round) + ") waits on " +
                               Describe(d) + " of round " + std::to_string(OpAt(d).round) +
                               "; " + transport + " posts round by round and needs it no later");
      }
      const int dep_round = IsMessageKind(OpAt(d).kind) ? OpAt(d).round : NetworkDepRound(d);
      if (dep_round != INT32_MAX && dep_round >= op.round) {
        return InvalidArgument(Describe(i) + " (round " + std::to_string(op.round) +
                               ") waits on a network op of round " + std::to_string(dep_round) +
                               "; " + transport + " posts round by round and needs it earlier");
      }
    }
    ++rounds_unready_[transport_of_[i]][op.round];
  }
  return Status::Ok();
}

// Op i became ready: one fewer op for its round to wait for.
void RankRun::ReadyGrouped(int i) {
  if (Grouped(i)) --rounds_unready_[transport_of_[i]][OpAt(i).round];
}

// A local op (Pack, Unpack, Copy) of a round after the lowest grouped round not yet posted must
// not take staging yet: packs running rounds ahead would fill the arena with slots that free only
// after their own later rounds, leaving no room for the receives of the round that must go first.
bool RankRun::AheadOfGroupedRounds(int i) const {
  if (IsMessageKind(OpAt(i).kind)) return false;
  for (const auto& [transport, rounds] : rounds_unready_) {
    if (!rounds.empty() && OpAt(i).round > rounds.begin()->first) return true;
  }
  return false;
}

// Grants the staging of every op of one round, all or none: when one op cannot have its slots,
// frees what this call granted and blocks the arena for the rest of the scan; the round is tried
// again once completions free space.
bool RankRun::GrantRound(const std::vector<int>& ops) {
  std::vector<int> granted;  // slots this call allocated
  for (int i : ops) {
    std::vector<int> missing;
    for (int slot : slots_of_[i]) {
      if (!placement_.Placed(slot)) missing.push_back(slot);
    }
    if (!GrantStaging(i)) {
      for (int slot : granted) {
        if (placement_.Placed(slot)) placement_.Release(slot);
      }
      staging_blocked_ = true;
      return false;
    }
    granted.insert(granted.end(), missing.begin(), missing.end());
  }
  return true;
}

// Posts, for each grouped transport, every round whose ops are all ready and whose staging can all
// be granted, lowest first, each as one group (never split).
Status RankRun::StartGroupedRounds() {
  for (auto& [transport, rounds] : rounds_unready_) {
    while (!rounds.empty() && rounds.begin()->second == 0) {
      const int round = rounds.begin()->first;
      std::vector<int> ops;
      for (const std::set<int, ReadyOrder>* ready : {&ready_sends_, &ready_recvs_}) {
        for (int i : *ready) {
          if (transport_of_[i] == transport && OpAt(i).round == round) ops.push_back(i);
        }
      }
      std::sort(ops.begin(), ops.end(), ready_sends_.key_comp());
      if (!GrantRound(ops)) break;
      rounds.erase(rounds.begin());
      FERRY_RETURN_IF_ERROR(transport->BeginGroup());
      for (int i : ops) {
        (OpAt(i).kind == OpKind::kRecv ? ready_recvs_ : ready_sends_).erase(i);
        FERRY_ASSIGN_OR_RETURN(bool started, TryStart(i));
        if (!started) {
          (void)transport->EndGroup();
          return Internal(Describe(i) + ": staging granted for its round, yet it did not start");
        }
      }
      FERRY_RETURN_IF_ERROR(transport->EndGroup());
    }
  }
  return Status::Ok();
}

}  // namespace ferry
