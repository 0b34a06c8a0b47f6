// TreeTable: the delivery trees of a reshard plan, interned. A tree is the set of ranks one
// message reaches: a single rank, a chain inside one destination node (the fan-out), or a chain of
// node leaders relayed between nodes with each node's chain hanging off its leader. Internal to
// //planner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ferry {

// Tree id < num_ranks is the single rank `id`; larger ids index the table. Each interned tree also
// keeps its members' children, flat, for emission (which walks a tree once per message).
class TreeTable {
 public:
  explicit TreeTable(int num_ranks) : num_ranks_(num_ranks) {}

  // The id of the tree whose member i is `ranks[i]`, with parent ranks[parent[i]] (or the sender
  // when parent[i] < 0; parents come first). Equal trees get equal ids; new trees get the next id.
  int Intern(const std::vector<int>& ranks, const std::vector<int>& parent);

  int NumTrees() const { return num_ranks_ + static_cast<int>(begin_.size()); }
  int Size(int tree) const {
    return tree < num_ranks_ ? 1 : end_[tree - num_ranks_] - begin_[tree - num_ranks_];
  }
  int Rank(int tree, int i) const {
    return tree < num_ranks_ ? tree : ranks_[begin_[tree - num_ranks_] + i];
  }
  // An interned tree (tree >= num_ranks) as flat arrays: its member ranks, parents and, per member
  // i, its children (member indexes) children[child_begin[i] .. child_begin[i + 1]).
  struct Shape {
    const int* ranks;
    const int* parent;
    const int* child_begin;
    const int* children;
  };
  Shape ShapeOf(int tree) const {
    const int begin = begin_[tree - num_ranks_];
    return {ranks_.data() + begin, parent_.data() + begin,
            child_begin_.data() + child_offset_[tree - num_ranks_], children_.data()};
  }

 private:
  // Appends a new tree's members, parents and children lists.
  void Append(const std::vector<int>& ranks, const std::vector<int>& parent);
  // Doubles the hash table (at least 1024 slots) and reinserts every tree.
  void Rehash();
  static size_t SlotOf(uint64_t hash, size_t mask) {
    return static_cast<size_t>(hash ^ (hash >> 29)) & mask;
  }

  int num_ranks_;
  std::vector<int> begin_, end_, ranks_, parent_;
  std::vector<int> child_offset_;  // per tree, its members' first entry in child_begin_
  std::vector<int> child_begin_;   // per member, plus one past each tree's last
  std::vector<int> children_;      // by position in ranks_ (the last slot of a tree is unused)
  std::vector<uint64_t> hashes_;   // per tree, the hash of its ranks and parents
  std::vector<int> slots_;         // open-addressing table: tree index (id - num_ranks), or -1
};

}  // namespace ferry
