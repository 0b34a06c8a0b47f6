// Shared machinery of the framework layout writers (tools/models/layout_writer.h): row blocks,
// replica sections and LayoutWriter's non-template pieces.
#include "tools/models/layout_writer.h"

#include <utility>

namespace ferry::models {

Box Rows(const TensorSpec& t, int64_t lo, int64_t hi) {
  Box b = Box::FromShape(t.shape);
  b.lo[0] = lo;
  b.hi[0] = hi;
  return b;
}

Box RowShard(const TensorSpec& t, int64_t offset, int64_t extent, int64_t parts, int64_t index) {
  const int64_t size = extent / parts;
  return Rows(t, offset + index * size, offset + (index + 1) * size);
}

std::string Num(int64_t v) { return std::to_string(v); }

Section BeginSection(const Layout& l) { return {l.buffers.size(), 0, l.fragments.size(), 0}; }

void EndSection(const Layout& l, Section& s) {
  s.buffers_end = l.buffers.size();
  s.fragments_end = l.fragments.size();
}

Status CloneSection(Layout& l, const Section& s, const std::vector<int>& shifts) {
  const size_t nb = s.buffers_end - s.buffers_begin;
  const size_t nf = s.fragments_end - s.fragments_begin;
  for (size_t f = s.fragments_begin; f < s.fragments_end; ++f) {
    const size_t b = static_cast<size_t>(l.fragments[f].loc.buffer);
    if (b < s.buffers_begin || b >= s.buffers_end) {
      return Internal("replicated section has a fragment in buffer '" + l.buffers[b].name +
                      "' created outside it");
    }
  }
  l.buffers.reserve(l.buffers.size() + nb * shifts.size());
  l.fragments.reserve(l.fragments.size() + nf * shifts.size());
  for (int shift : shifts) {
    const int buffer_delta = static_cast<int>(l.buffers.size() - s.buffers_begin);
    for (size_t b = s.buffers_begin; b < s.buffers_end; ++b) {
      BufferSpec copy = l.buffers[b];
      copy.rank += shift;
      l.buffers.push_back(std::move(copy));
    }
    for (size_t f = s.fragments_begin; f < s.fragments_end; ++f) {
      Fragment copy = l.fragments[f];
      copy.loc.rank += shift;
      copy.loc.buffer += buffer_delta;
      l.fragments.push_back(copy);
    }
  }
  return Status::Ok();
}

std::vector<int> Shifts(int count, int step) {
  std::vector<int> out;
  for (int i = 1; i < count; ++i) out.push_back(i * step);
  return out;
}

Result<std::array<int, 3>> LayoutWriter::AddExpertStacks(int64_t l) {
  std::array<int, 3> ids{};
  const char* projs[3] = {"gate_proj", "up_proj", "down_proj"};
  for (int j = 0; j < 3; ++j) {
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* member, Get(ExpertTensorName(c_, l, 0, projs[j])));
    TensorSpec stack{ExpertStackName(c_, l, projs[j]), {c_.num_experts}, member->dtype};
    stack.shape.insert(stack.shape.end(), member->shape.begin(), member->shape.end());
    FERRY_ASSIGN_OR_RETURN(ids[j], out_.AddTensor(stack));
  }
  return ids;
}

Result<std::vector<std::array<int, 3>>> LayoutWriter::AddExpertTensors(int64_t l) {
  std::vector<std::array<int, 3>> ids;
  if (stack_experts_) {
    FERRY_ASSIGN_OR_RETURN(const auto stacks, AddExpertStacks(l));
    ids.push_back(stacks);
    return ids;
  }
  ids.resize(static_cast<size_t>(c_.num_experts));
  const char* projs[3] = {"gate_proj", "up_proj", "down_proj"};
  for (int64_t e = 0; e < c_.num_experts; ++e) {
    for (int j = 0; j < 3; ++j) {
      FERRY_ASSIGN_OR_RETURN(const TensorSpec* t, Get(ExpertTensorName(c_, l, e, projs[j])));
      FERRY_ASSIGN_OR_RETURN(ids[e][j], out_.AddTensor(*t));
    }
  }
  return ids;
}

Result<const TensorSpec*> LayoutWriter::Get(const std::string& name) const {
  const TensorSpec* t = preset_.Find(name);
  if (t == nullptr) return Internal("model '" + c_.name + "' has no tensor '" + name + "'");
  return t;
}

Result<const TensorSpec*> LayoutWriter::LayerTensor(int64_t layer,
                                                    const std::string& suffix) const {
  return Get(LayerTensorName(c_, layer, suffix));
}

Status LayoutWriter::Replicated(const std::string& hf_name, const std::vector<int>& ranks,
                                const std::string& buffer) {
  FERRY_ASSIGN_OR_RETURN(const TensorSpec* t, Get(hf_name));
  return AddReplicated(out_, *t, ranks, buffer);
}

Status LayoutWriter::Column(const std::string& hf_name, const std::vector<int>& tp_ranks,
                            const std::string& buffer) {
  FERRY_ASSIGN_OR_RETURN(const TensorSpec* t, Get(hf_name));
  return AddColumnParallel(out_, *t, tp_ranks, buffer);
}

Status LayoutWriter::Row(const std::string& hf_name, const std::vector<int>& tp_ranks,
                         const std::string& buffer) {
  FERRY_ASSIGN_OR_RETURN(const TensorSpec* t, Get(hf_name));
  return AddRowParallel(out_, *t, tp_ranks, buffer);
}

Status LayoutWriter::Vocab(const std::string& hf_name, const std::vector<int>& tp_ranks,
                           int64_t rows_per_rank, const std::string& buffer) {
  FERRY_ASSIGN_OR_RETURN(const TensorSpec* t, Get(hf_name));
  const int64_t padded = rows_per_rank * static_cast<int64_t>(tp_ranks.size());
  if (padded < t->shape[0]) {
    return Internal("'" + t->name + "': " + Num(padded) + " padded rows for a vocabulary of " +
                    Num(t->shape[0]));
  }
  // A pad multiple of rows_per_rank rounds the vocabulary up to exactly `padded` rows.
  return AddVocabParallel(out_, *t, tp_ranks, rows_per_rank, buffer);
}

Status LayoutWriter::GateUp(const std::string& gate_name, const std::string& up_name,
                            const std::vector<int>& tp_ranks, const std::string& buffer,
                            int64_t base_offset) {
  FERRY_ASSIGN_OR_RETURN(const TensorSpec* gate, Get(gate_name));
  FERRY_ASSIGN_OR_RETURN(const TensorSpec* up, Get(up_name));
  const int64_t tp = static_cast<int64_t>(tp_ranks.size());
  for (int64_t i = 0; i < tp; ++i) {
    FERRY_RETURN_IF_ERROR(AddFusedConcat(
        out_, tp_ranks[i], buffer,
        {{*gate, RowShard(*gate, 0, gate->shape[0], tp, i)},
         {*up, RowShard(*up, 0, up->shape[0], tp, i)}},
        0, base_offset));
  }
  return Status::Ok();
}

std::string LayoutWriter::EmbeddingName() const {
  return c_.family == ModelFamily::kNemotronH ? "backbone.embeddings.weight"
                                              : "model.embed_tokens.weight";
}

std::string LayoutWriter::FinalNormName() const {
  return c_.family == ModelFamily::kNemotronH ? "backbone.norm_f.weight" : "model.norm.weight";
}

}  // namespace ferry::models
