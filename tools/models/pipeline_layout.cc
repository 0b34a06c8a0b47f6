// Megatron's --pipeline-model-parallel-layout strings (tools/models/pipeline_layout.h).
#include "tools/models/pipeline_layout.h"

#include <algorithm>
#include <cctype>

#include "core/base/strings.h"

namespace ferry::models {

namespace {

std::string Num(int64_t v) { return std::to_string(v); }

bool IsDigit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

// The decimal count at text[at..] (at least one digit, as the regex's \d+), or -1 when none or when
// it exceeds kMaxPipelineLayoutChars; *end is one past its last digit.
int64_t RepeatCount(const std::string& text, size_t at, size_t* end) {
  size_t i = at;
  int64_t n = 0;
  while (i < text.size() && IsDigit(text[i])) {
    n = n * 10 + (text[i] - '0');
    if (n > kMaxPipelineLayoutChars) return -1;
    ++i;
  }
  *end = i;
  return i == at ? -1 : n;
}

// One left-to-right substitution pass, as Python's re.sub with one of parse_str_to_list's two
// patterns: `grouped` r'\(([^)]+)\)\*(\d+)' (the text between '(' and the first ')' after it,
// repeated), else r'(.)\*(\d+)' (one character repeated).
Result<std::string> Unroll(const std::string& text, bool grouped) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    size_t body_begin = i, body_end = i;
    if (grouped && text[i] == '(') {
      body_begin = i + 1;
      body_end = text.find(')', body_begin);
    } else if (!grouped && text[i] != '\n') {
      body_end = i + 1;
    }
    const bool has_body = body_end != std::string::npos && body_end > body_begin;
    const size_t star = grouped ? body_end + 1 : body_end;
    size_t end = 0;
    int64_t n = -2;  // no match at i
    if (has_body && star + 1 < text.size() && text[star] == '*' && IsDigit(text[star + 1])) {
      n = RepeatCount(text, star + 1, &end);
    }
    if (n == -1) {
      return InvalidArgument("pipeline layout repeat count at '" + text.substr(star) +
                             "' exceeds " + Num(kMaxPipelineLayoutChars));
    }
    if (n < 0) {
      out += text[i++];
      continue;
    }
    const std::string body = text.substr(body_begin, body_end - body_begin);
    if (static_cast<int64_t>(out.size() + body.size() * static_cast<size_t>(n)) >
        kMaxPipelineLayoutChars) {
      return InvalidArgument("pipeline layout expands past " + Num(kMaxPipelineLayoutChars) +
                             " symbols");
    }
    for (int64_t k = 0; k < n; ++k) out += body;
    i = end;
  }
  return out;
}

}  // namespace

Result<std::vector<std::string>> ParseMegatronPipelineLayout(const std::string& text) {
  if (static_cast<int64_t>(text.size()) > kMaxPipelineLayoutChars) {
    return InvalidArgument("pipeline layout of " + Num(static_cast<int64_t>(text.size())) +
                           " characters exceeds " + Num(kMaxPipelineLayoutChars));
  }
  std::string s = text;
  s.erase(std::remove(s.begin(), s.end(), ','), s.end());  // "purely cosmetic commas"
  FERRY_ASSIGN_OR_RETURN(s, Unroll(s, true));
  FERRY_ASSIGN_OR_RETURN(s, Unroll(s, false));
  std::vector<std::string> stages = Split(s, '|');
  for (const std::string& stage : stages) {
    for (char c : stage) {
      if (c != 'E' && c != 'L' && c != 't' && c != 'm') {
        return InvalidArgument("Megatron rejects the pipeline layout: Invalid layer character: " +
                               std::string(1, c) + " (stage='" + stage + "', layout_str='" + s +
                               "'), known layer characters: ['E', 'L', 't', 'm']");
      }
    }
  }
  return stages;
}

namespace {

// validate_layer_layout's MTP checks (megatron/core/transformer/pipeline_parallel_layer_layout.py)
// on `stages` (string order), with Megatron's messages; the stage holding the MTP layers, or -1.
Result<int> MtpStage(const std::vector<std::string>& stages, const std::string& flat, int pp,
                     int64_t mtp_layers, const std::string& why) {
  const int64_t mtps = std::count(flat.begin(), flat.end(), 'm');
  if (mtps != mtp_layers) {
    return InvalidArgument(why + "Number of mtp layers in layout must match mtp_num_layers (" +
                           Num(mtps) + " m in the layout, mtp=" + Num(mtp_layers) + ")");
  }
  if (mtps == 0) return -1;
  if (flat.find('t', flat.find('m')) != std::string::npos) {
    return InvalidArgument(why + "decoder layers must be placed before MTP layers");
  }
  const int vpp = static_cast<int>(stages.size()) / pp;
  int at = -1;
  for (int i = 0; i < static_cast<int>(stages.size()); ++i) {
    const int64_t here = std::count(stages[i].begin(), stages[i].end(), 'm');
    if (here == 0) continue;
    if (i / pp != vpp - 1) {
      return InvalidArgument(why + "Currently we restrict that the MTP should be always in the "
                             "last virtual pipeline stage of that rank. But got stage " +
                             Num(i) + " (virtual stage " + Num(i / pp) + " of pipeline rank " +
                             Num(i % pp) + ")");
    }
    if (here != mtp_layers) {
      return InvalidArgument(why + "All of the MTP layers must be in the same one virtual "
                             "pipeline stage");
    }
    at = i;
  }
  return at;
}

}  // namespace

Result<MegatronLayoutCounts> MegatronLayoutLayerCounts(const std::string& text, int pp,
                                                       int64_t num_layers, int64_t mtp_layers) {
  FERRY_ASSIGN_OR_RETURN(const std::vector<std::string> stages, ParseMegatronPipelineLayout(text));
  const std::string why = "Megatron rejects the pipeline layout '" + text + "': ";
  if (pp < 1 || stages.size() % static_cast<size_t>(pp) != 0) {
    return InvalidArgument(why + "pipeline_model_parallel_layout must be divisible by "
                           "pipeline_model_parallel_size (len(layout)=" +
                           Num(static_cast<int64_t>(stages.size())) +
                           ", pipeline_model_parallel_size=" + Num(pp) + ")");
  }
  std::string flat;
  for (const std::string& stage : stages) flat += stage;
  if (flat.empty() || flat.front() != 'E') {
    return InvalidArgument(why + "The first layer must be embedding, but got " +
                           (flat.empty() ? std::string("none") : flat.substr(0, 1)));
  }
  if (flat.back() != 'L') {
    return InvalidArgument(why + "The last layer must be loss, but got " + flat.substr(flat.size() - 1));
  }
  if (std::count(flat.begin(), flat.end(), 'E') != 1) {
    return InvalidArgument(why + "Embedding must be specified exactly once");
  }
  if (std::count(flat.begin(), flat.end(), 'L') != 1) {
    return InvalidArgument(why + "Loss must be specified exactly once");
  }
  const int64_t decoders = std::count(flat.begin(), flat.end(), 't');
  if (decoders != num_layers) {
    return InvalidArgument(why + "Number of decoder layers " + Num(decoders) +
                           " must match num_layers " + Num(num_layers));
  }
  MegatronLayoutCounts out;
  FERRY_ASSIGN_OR_RETURN(out.mtp_stage, MtpStage(stages, flat, pp, mtp_layers, why));
  for (const std::string& stage : stages) {
    out.decoders.push_back(static_cast<int>(std::count(stage.begin(), stage.end(), 't')));
  }
  return out;
}

}  // namespace ferry::models
