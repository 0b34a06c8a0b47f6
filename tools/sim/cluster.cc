// Cluster presets, YAML loading, quantity parsing and rank mapping for the simulator.
#include "tools/sim/cluster.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <sstream>

#include "core/base/dtype.h"
#include "core/base/file_io.h"
#include "core/base/strings.h"
#include "core/layout/limits.h"

namespace ferry::sim {
namespace {

// Splits "400Gb/s" into (400, "Gb/s"); fails when there is no leading number.
Result<std::pair<double, std::string>> SplitNumber(std::string_view text) {
  std::string s = Trim(text);
  if (s.empty()) return InvalidArgument("empty quantity");
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(s, &used);
  } catch (...) {
    return InvalidArgument("'" + s + "' does not start with a number");
  }
  std::string unit = Trim(std::string_view(s).substr(used));
  if (!std::isfinite(value)) return InvalidArgument("'" + s + "' is not finite");
  return std::make_pair(value, unit);
}

// The entries of a table value: a list of at most `most` entries `[a, b, c]` of three scalars, each
// read by `parse(a, b, c)` into a Result<Entry>. Errors name an entry (1-based) as "`word` i", and
// the form `form` (e.g. "[row bytes, pitch bytes, rate]") with `example`; `words` is the plural.
template <typename Entry, typename Parse>
Result<std::vector<Entry>> ParseTable(const YAML::Node& node, int most, const std::string& word,
                                      const std::string& words, const std::string& form,
                                      const std::string& example, Parse parse) {
  if (!node.IsSequence()) return InvalidArgument("must be a list of " + form + " " + words);
  if (node.size() > static_cast<size_t>(most)) {
    return InvalidArgument("has " + std::to_string(node.size()) + " " + words + ", more than " +
                           std::to_string(most));
  }
  std::vector<Entry> table;
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node& e = node[i];
    const std::string where = word + " " + std::to_string(i + 1);
    if (!e.IsSequence() || e.size() != 3 || !e[0].IsScalar() || !e[1].IsScalar() || !e[2].IsScalar()) {
      return InvalidArgument(where + " must be " + form + ", e.g. " + example);
    }
    Result<Entry> entry = parse(e[0].as<std::string>(), e[1].as<std::string>(), e[2].as<std::string>());
    if (!entry.ok()) return entry.status().WithContext(where);
    table.push_back(*entry);
  }
  return table;
}

// The points of a host_copy_row_rates value: a list of [row size, pitch size, bandwidth].
Result<std::vector<RowRate>> ParseRowRates(const YAML::Node& node) {
  return ParseTable<RowRate>(node, kMaxRowRates, "point", "points", "[row bytes, pitch bytes, rate]",
                             "[64B, 128B, 4.9GB/s]",
                             [](const std::string& a, const std::string& b, const std::string& c) -> Result<RowRate> {
                               FERRY_ASSIGN_OR_RETURN(const int64_t row, ParseSize(a));
                               FERRY_ASSIGN_OR_RETURN(const int64_t pitch, ParseSize(b));
                               FERRY_ASSIGN_OR_RETURN(const double rate, ParseBandwidth(c));
                               return RowRate{row, pitch, rate};
                             });
}

// The entries of a host_convert_rates value: a list of [from dtype, to dtype, bandwidth].
Result<std::vector<ConvertRate>> ParseConvertRates(const YAML::Node& node) {
  return ParseTable<ConvertRate>(node, kMaxConvertRates, "entry", "entries", "[from dtype, to dtype, rate]",
                                 "[bf16, fp8_e4m3, 3.4GB/s]",
                                 [](const std::string& a, const std::string& b, const std::string& c) -> Result<ConvertRate> {
                                   FERRY_ASSIGN_OR_RETURN(const DType from, ParseDType(a));
                                   FERRY_ASSIGN_OR_RETURN(const DType to, ParseDType(b));
                                   FERRY_ASSIGN_OR_RETURN(const double rate, ParseBandwidth(c));
                                   return ConvertRate{from, to, rate};
                                 });
}

}  // namespace

Result<double> ParseBandwidth(std::string_view text) {
  FERRY_ASSIGN_OR_RETURN(auto parts, SplitNumber(text));
  static const std::map<std::string, double> kUnits = {
      {"", 1.0},        {"B/s", 1.0},      {"KB/s", 1e3},     {"MB/s", 1e6},
      {"GB/s", 1e9},    {"TB/s", 1e12},    {"KiB/s", 1024.0}, {"MiB/s", 1048576.0},
      {"GiB/s", 1073741824.0},              {"b/s", 1.0 / 8},  {"Kb/s", 1e3 / 8},
      {"Mb/s", 1e6 / 8}, {"Gb/s", 1e9 / 8}, {"Tb/s", 1e12 / 8}, {"Gbps", 1e9 / 8}};
  auto it = kUnits.find(parts.second);
  if (it == kUnits.end()) {
    return InvalidArgument("unknown bandwidth unit '" + parts.second + "' in '" +
                           std::string(text) + "' (use B/s, GB/s, Gb/s, GiB/s, ...)");
  }
  if (parts.first < 0) return InvalidArgument("negative bandwidth '" + std::string(text) + "'");
  return parts.first * it->second;
}

Result<double> ParseDuration(std::string_view text) {
  FERRY_ASSIGN_OR_RETURN(auto parts, SplitNumber(text));
  static const std::map<std::string, double> kUnits = {
      {"", 1.0}, {"s", 1.0}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}};
  auto it = kUnits.find(parts.second);
  if (it == kUnits.end()) {
    return InvalidArgument("unknown time unit '" + parts.second + "' in '" + std::string(text) +
                           "' (use s, ms, us, ns)");
  }
  if (parts.first < 0) return InvalidArgument("negative duration '" + std::string(text) + "'");
  return parts.first * it->second;
}

Result<int64_t> ParseSize(std::string_view text) {
  FERRY_ASSIGN_OR_RETURN(auto parts, SplitNumber(text));
  static const std::map<std::string, double> kUnits = {
      {"", 1.0},   {"B", 1.0},   {"KB", 1e3},        {"MB", 1e6},           {"GB", 1e9},
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
  auto it = kUnits.find(parts.second);
  if (it == kUnits.end()) {
    return InvalidArgument("unknown size unit '" + parts.second + "' in '" + std::string(text) +
                           "' (use B, KiB, MiB, GiB, KB, MB, GB)");
  }
  if (parts.first < 0) return InvalidArgument("negative size '" + std::string(text) + "'");
  return static_cast<int64_t>(std::llround(parts.first * it->second));
}

int ClusterSpec::NicOfLocalGpu(int local_gpu) const {
  return static_cast<int>(static_cast<int64_t>(local_gpu) * nics_per_node / gpus_per_node);
}

namespace {

Status CheckPositive(double v, const char* field) {
  if (!(v > 0) || !std::isfinite(v)) {
    return InvalidArgument(std::string("cluster field '") + field + "' must be > 0");
  }
  return Status::Ok();
}

Status CheckNonNegative(double v, const char* field) {
  if (!(v >= 0) || !std::isfinite(v)) {
    return InvalidArgument(std::string("cluster field '") + field + "' must be >= 0");
  }
  return Status::Ok();
}

// The counts: GPUs, ranks, nodes, NICs and trays.
Status ValidateCounts(const ClusterSpec& c) {
  if (c.gpus_per_node < 1) return InvalidArgument("cluster field 'gpus_per_node' must be >= 1");
  if (c.ranks_per_gpu < 1 || c.ranks_per_gpu > kMaxRanksPerGpu) {
    return InvalidArgument("cluster field 'ranks_per_gpu' must be in [1, " +
                           std::to_string(kMaxRanksPerGpu) + "]");
  }
  if (static_cast<int64_t>(c.gpus_per_node) * c.ranks_per_gpu > kMaxRanks) {
    return InvalidArgument("cluster fields 'gpus_per_node' x 'ranks_per_gpu' exceed " +
                           std::to_string(kMaxRanks) + " ranks a node");
  }
  if (c.num_nodes < 0) return InvalidArgument("cluster field 'num_nodes' must be >= 0");
  if (c.nics_per_node < 1) return InvalidArgument("cluster field 'nics_per_node' must be >= 1");
  if (c.gpus_per_tray < 0) return InvalidArgument("cluster field 'gpus_per_tray' must be >= 0");
  return Status::Ok();
}

// Bandwidths, latencies, overheads, efficiencies and the staging chunk.
Status ValidateRates(const ClusterSpec& c) {
  FERRY_RETURN_IF_ERROR(CheckPositive(c.nic_bandwidth, "nic_bandwidth"));
  FERRY_RETURN_IF_ERROR(CheckPositive(c.nvlink_bandwidth, "nvlink_bandwidth"));
  FERRY_RETURN_IF_ERROR(CheckPositive(c.copy_bandwidth, "copy_bandwidth"));
  FERRY_RETURN_IF_ERROR(CheckPositive(c.pack_bandwidth, "pack_bandwidth"));
  FERRY_RETURN_IF_ERROR(CheckPositive(c.quantize_bandwidth, "quantize_bandwidth"));
  FERRY_RETURN_IF_ERROR(CheckPositive(c.fp8_convert_bandwidth, "fp8_convert_bandwidth"));
  FERRY_RETURN_IF_ERROR(CheckPositive(c.pcie_bandwidth, "pcie_bandwidth"));
  FERRY_RETURN_IF_ERROR(CheckPositive(c.host_memory_bandwidth, "host_memory_bandwidth"));
  FERRY_RETURN_IF_ERROR(CheckPositive(c.host_copy_bandwidth, "host_copy_bandwidth"));
  FERRY_RETURN_IF_ERROR(CheckNonNegative(c.spine_bandwidth_per_node, "spine_bandwidth_per_node"));
  FERRY_RETURN_IF_ERROR(CheckNonNegative(c.host_message_bandwidth, "host_message_bandwidth"));
  FERRY_RETURN_IF_ERROR(
      CheckNonNegative(c.host_message_stream_bandwidth, "host_message_stream_bandwidth"));
  FERRY_RETURN_IF_ERROR(CheckNonNegative(c.nic_latency, "nic_latency"));
  FERRY_RETURN_IF_ERROR(CheckNonNegative(c.nic_message_overhead, "nic_message_overhead"));
  FERRY_RETURN_IF_ERROR(CheckNonNegative(c.cross_rail_latency, "cross_rail_latency"));
  FERRY_RETURN_IF_ERROR(CheckNonNegative(c.nvlink_latency, "nvlink_latency"));
  FERRY_RETURN_IF_ERROR(CheckNonNegative(c.nvlink_message_overhead, "nvlink_message_overhead"));
  FERRY_RETURN_IF_ERROR(CheckNonNegative(c.kernel_overhead, "kernel_overhead"));
  FERRY_RETURN_IF_ERROR(CheckNonNegative(c.op_post_overhead, "op_post_overhead"));
  FERRY_RETURN_IF_ERROR(CheckNonNegative(c.tensor_load_overhead, "tensor_load_overhead"));
  if (!(c.network_efficiency > 0 && c.network_efficiency <= 1)) {
    return InvalidArgument("cluster field 'network_efficiency' must be in (0, 1]");
  }
  if (!(c.nvlink_efficiency > 0 && c.nvlink_efficiency <= 1)) {
    return InvalidArgument("cluster field 'nvlink_efficiency' must be in (0, 1]");
  }
  if (c.staging_chunk_bytes < 1) {
    return InvalidArgument("cluster field 'staging_chunk_bytes' must be >= 1");
  }
  return Status::Ok();
}

// The host-memory calibration: the rate tables, the quantizer's rate and the cores, each needing
// the row table its rates count against.
Status ValidateHostCalibration(const ClusterSpec& c) {
  Status rows = ValidateRowRates(c.host_copy_row_rates);
  if (!rows.ok()) {
    return InvalidArgument("cluster field 'host_copy_row_rates': " + rows.message());
  }
  Status converts = ValidateConvertRates(c.host_convert_rates);
  if (!converts.ok()) {
    return InvalidArgument("cluster field 'host_convert_rates': " + converts.message());
  }
  FERRY_RETURN_IF_ERROR(CheckNonNegative(c.host_quantize_rate, "host_quantize_rate"));
  if (c.host_quantize_rate > 0 && c.host_copy_row_rates.empty()) {
    return InvalidArgument(
        "cluster field 'host_quantize_rate' needs 'host_copy_row_rates': its rate counts against "
        "that table's contiguous rate");
  }
  if (c.host_cores < 0 || c.host_cores > kMaxHostCores) {
    return InvalidArgument("cluster field 'host_cores' must be in [0, " +
                           std::to_string(kMaxHostCores) + "]");
  }
  if (c.host_cores > 0 && c.host_quantize_rate == 0) {
    return InvalidArgument("cluster field 'host_cores' needs 'host_quantize_rate': only Quantize "
                           "ops run on the cores");
  }
  if (!c.host_convert_rates.empty() && c.host_copy_row_rates.empty()) {
    return InvalidArgument(
        "cluster field 'host_convert_rates' needs 'host_copy_row_rates': its rates count against "
        "that table's contiguous rate");
  }
  return Status::Ok();
}

}  // namespace

Status ClusterSpec::Validate() const {
  FERRY_RETURN_IF_ERROR(ValidateCounts(*this));
  FERRY_RETURN_IF_ERROR(ValidateRates(*this));
  return ValidateHostCalibration(*this);
}

std::string ClusterSpec::Summary() const {
  std::ostringstream out;
  out << name << ": " << gpus_per_node << " GPUs per NVLink domain";
  if (gpus_per_tray > 0 && gpus_per_tray != gpus_per_node) out << " (" << gpus_per_tray << " a tray)";
  if (ranks_per_gpu > 1) out << ", " << ranks_per_gpu << " ranks sharing each GPU";
  if (num_nodes > 0) out << ", " << num_nodes << " domains";
  out << ", " << nics_per_node << " NICs x " << nic_bandwidth * 8 / 1e9 << " Gb/s a domain"
      << " (efficiency " << network_efficiency << ")"
      << ", NVLink " << nvlink_bandwidth / 1e9 << " GB/s/direction/GPU"
      << ", copy " << copy_bandwidth / 1e12 << " TB/s, pack " << pack_bandwidth / 1e12 << " TB/s"
      << (gpu_direct ? ", GPUDirect RDMA" : ", host-staged network")
      << (host_memory_ranks ? ", ranks in host memory" : "");
  return out.str();
}

std::vector<std::string> ClusterPresetNames() {
  return {"dgx-h100", "dgx-h200", "gb200-nvl72", "efa-h100"};
}

Result<ClusterSpec> ClusterPreset(std::string_view name) {
  ClusterSpec c;
  // Calibrated free parameters shared by the GPU presets (see docs/simulator.md).
  c.network_efficiency = 0.92;
  c.nvlink_efficiency = 0.80;
  c.nic_message_overhead = 4e-6;
  // Measured on the lent H200 by tools/device/sim_overheads.sh (docs/simulator.md, "Free
  // parameters"): the GPU's time an executor launch of a small copy takes back to back (a kernel
  // and its completion event, 2.2-2.7 us), and the executor thread's time a local op of a reused
  // plan on CUDA buffers takes on that machine's host CPU (8.0-9.2 us).
  c.kernel_overhead = 2.4e-6;
  c.op_post_overhead = 8.6e-6;
  // vLLM 0.33.0's load_weights per tensor, measured on the CPU by
  // tools/sim/measure_load_weights.py (docs/simulator.md, "Free parameters").
  c.tensor_load_overhead = 35e-6;
  if (name == "dgx-h100") {
    c.name = "dgx-h100";
    c.description = "NVIDIA DGX H100: 8 H100 SXM, 8 x 400 Gb/s InfiniBand (rail-optimized), NVLink 4";
    // H200 measurements (docs/BENCHMARKS.md) scaled by HBM bandwidth, 3.35 / 4.8 TB/s.
    c.copy_bandwidth = 1.48e12;
    c.pack_bandwidth = 1.08e12;
    c.quantize_bandwidth = 0.76e12;
    c.fp8_convert_bandwidth = 1.42e12;
    c.pcie_bandwidth = 50e9;
    return c;
  }
  if (name == "dgx-h200") {
    c.name = "dgx-h200";
    c.description = "NVIDIA DGX H200: 8 H200 SXM, 8 x 400 Gb/s InfiniBand (rail-optimized), NVLink 4";
    // Measured on the lent H200 (docs/BENCHMARKS.md): cudaMemcpy D2D 1 GiB in 0.507 ms, the
    // batched pack kernel over 4096 fragments at 3081 GB/s read + write, the block-quantize kernel
    // at 3255 GB/s read + write on bf16 (3 bytes an fp8 element: 1.09e12 of fp8 a second), the
    // batched convert kernel from bf16 into fp8 e4m3 at 4071 GB/s read + write.
    c.copy_bandwidth = 2.12e12;
    c.pack_bandwidth = 1.54e12;
    c.quantize_bandwidth = 1.09e12;
    c.fp8_convert_bandwidth = 2.04e12;
    c.pcie_bandwidth = 50e9;
    return c;
  }
  if (name == "gb200-nvl72") {
    c.name = "gb200-nvl72";
    c.description =
        "NVIDIA GB200 NVL72: 72 B200 in one NVLink 5 domain (4 GPUs a tray), one 400 Gb/s NIC per GPU";
    c.gpus_per_node = 72;
    c.gpus_per_tray = 4;
    c.nics_per_node = 72;
    c.nvlink_bandwidth = 900e9;
    // H200 measurements scaled by HBM bandwidth, 8.0 / 4.8 TB/s.
    c.copy_bandwidth = 3.5e12;
    c.pack_bandwidth = 2.55e12;
    c.quantize_bandwidth = 1.81e12;
    c.fp8_convert_bandwidth = 3.40e12;
    c.pcie_bandwidth = 100e9;
    c.host_memory_bandwidth = 500e9;
    return c;
  }
  if (name == "efa-h100") {
    c.name = "efa-h100";
    c.description =
        "Ethernet/EFA-like: 8 H100 a node, 3200 Gb/s of EFA a node (8 x 400 Gb/s), no rail alignment, "
        "higher per-message cost";
    c.rail_optimized = false;
    c.nic_latency = 15e-6;
    c.nic_message_overhead = 12e-6;
    c.network_efficiency = 0.80;
    c.copy_bandwidth = 1.48e12;
    c.pack_bandwidth = 1.08e12;
    c.quantize_bandwidth = 0.76e12;
    c.fp8_convert_bandwidth = 1.42e12;
    return c;
  }
  std::string known;
  for (const std::string& n : ClusterPresetNames()) known += (known.empty() ? "" : ", ") + n;
  return NotFound("unknown cluster preset '" + std::string(name) + "' (known: " + known +
                  "; or give a path to a cluster YAML file)");
}

namespace {

// How one scalar cluster key is parsed into its field.
using Setter = std::function<Status(const std::string&)>;

Setter IntegerSetter(int* field) {
  return [field](const std::string& v) -> Status {
    FERRY_ASSIGN_OR_RETURN(auto parts, SplitNumber(v));
    if (!parts.second.empty() || parts.first != std::floor(parts.first)) {
      return InvalidArgument("'" + v + "' is not an integer");
    }
    if (std::fabs(parts.first) > std::numeric_limits<int>::max()) {
      return InvalidArgument("'" + v + "' is out of range");
    }
    *field = static_cast<int>(parts.first);
    return Status::Ok();
  };
}

Setter NumberSetter(double* field) {
  return [field](const std::string& v) -> Status {
    FERRY_ASSIGN_OR_RETURN(auto parts, SplitNumber(v));
    if (!parts.second.empty()) return InvalidArgument("'" + v + "' is not a plain number");
    *field = parts.first;
    return Status::Ok();
  };
}

Setter BandwidthSetter(double* field) {
  return [field](const std::string& v) -> Status {
    FERRY_ASSIGN_OR_RETURN(*field, ParseBandwidth(v));
    return Status::Ok();
  };
}

Setter DurationSetter(double* field) {
  return [field](const std::string& v) -> Status {
    FERRY_ASSIGN_OR_RETURN(*field, ParseDuration(v));
    return Status::Ok();
  };
}

Setter SizeSetter(int64_t* field) {
  return [field](const std::string& v) -> Status {
    FERRY_ASSIGN_OR_RETURN(*field, ParseSize(v));
    return Status::Ok();
  };
}

Setter BooleanSetter(bool* field) {
  return [field](const std::string& v) -> Status {
    if (v == "true" || v == "yes" || v == "1") {
      *field = true;
    } else if (v == "false" || v == "no" || v == "0") {
      *field = false;
    } else {
      return InvalidArgument("'" + v + "' is not a boolean (true/false)");
    }
    return Status::Ok();
  };
}

Setter TextSetter(std::string* field) {
  return [field](const std::string& v) -> Status {
    *field = v;
    return Status::Ok();
  };
}

// The scalar keys of a cluster file, each writing its field of `c`.
std::map<std::string, Setter> ClusterSetters(ClusterSpec& c) {
  return {
      {"name", TextSetter(&c.name)},
      {"description", TextSetter(&c.description)},
      {"gpus_per_node", IntegerSetter(&c.gpus_per_node)},
      {"gpus_per_tray", IntegerSetter(&c.gpus_per_tray)},
      {"num_nodes", IntegerSetter(&c.num_nodes)},
      {"nics_per_node", IntegerSetter(&c.nics_per_node)},
      {"ranks_per_gpu", IntegerSetter(&c.ranks_per_gpu)},
      {"nic_bandwidth", BandwidthSetter(&c.nic_bandwidth)},
      {"nic_latency", DurationSetter(&c.nic_latency)},
      {"nic_message_overhead", DurationSetter(&c.nic_message_overhead)},
      {"network_efficiency", NumberSetter(&c.network_efficiency)},
      {"rail_optimized", BooleanSetter(&c.rail_optimized)},
      {"cross_rail_latency", DurationSetter(&c.cross_rail_latency)},
      {"spine_bandwidth_per_node", BandwidthSetter(&c.spine_bandwidth_per_node)},
      {"nvlink_bandwidth", BandwidthSetter(&c.nvlink_bandwidth)},
      {"nvlink_latency", DurationSetter(&c.nvlink_latency)},
      {"nvlink_message_overhead", DurationSetter(&c.nvlink_message_overhead)},
      {"nvlink_efficiency", NumberSetter(&c.nvlink_efficiency)},
      {"copy_bandwidth", BandwidthSetter(&c.copy_bandwidth)},
      {"pack_bandwidth", BandwidthSetter(&c.pack_bandwidth)},
      {"quantize_bandwidth", BandwidthSetter(&c.quantize_bandwidth)},
      {"fp8_convert_bandwidth", BandwidthSetter(&c.fp8_convert_bandwidth)},
      {"kernel_overhead", DurationSetter(&c.kernel_overhead)},
      {"op_post_overhead", DurationSetter(&c.op_post_overhead)},
      {"tensor_load_overhead", DurationSetter(&c.tensor_load_overhead)},
      {"gpu_direct", BooleanSetter(&c.gpu_direct)},
      {"pcie_bandwidth", BandwidthSetter(&c.pcie_bandwidth)},
      {"host_memory_bandwidth", BandwidthSetter(&c.host_memory_bandwidth)},
      {"staging_chunk_bytes", SizeSetter(&c.staging_chunk_bytes)},
      {"host_memory_ranks", BooleanSetter(&c.host_memory_ranks)},
      {"host_copy_bandwidth", BandwidthSetter(&c.host_copy_bandwidth)},
      {"host_message_bandwidth", BandwidthSetter(&c.host_message_bandwidth)},
      {"host_message_stream_bandwidth", BandwidthSetter(&c.host_message_stream_bandwidth)},
      {"host_quantize_rate", BandwidthSetter(&c.host_quantize_rate)},
      {"host_cores", IntegerSetter(&c.host_cores)},
  };
}

// One key of the file (not "base"): a rate table, or a scalar through its setter.
Status ApplyClusterKey(const std::string& key, const YAML::Node& value,
                       const std::map<std::string, Setter>& setters, ClusterSpec& c) {
  if (key == "host_convert_rates") {
    Result<std::vector<ConvertRate>> table = ParseConvertRates(value);
    if (!table.ok()) return table.status().WithContext("cluster YAML key '" + key + "'");
    c.host_convert_rates = std::move(*table);
    return Status::Ok();
  }
  if (key == "host_copy_row_rates") {
    Result<std::vector<RowRate>> table = ParseRowRates(value);
    if (!table.ok()) return table.status().WithContext("cluster YAML key '" + key + "'");
    c.host_copy_row_rates = std::move(*table);
    return Status::Ok();
  }
  auto it = setters.find(key);
  if (it == setters.end()) return InvalidArgument("cluster YAML: unknown key '" + key + "'");
  if (!value.IsScalar()) {
    return InvalidArgument("cluster YAML: key '" + key + "' must have a scalar value");
  }
  Status s = it->second(value.as<std::string>());
  if (!s.ok()) return s.WithContext("cluster YAML key '" + key + "'");
  return Status::Ok();
}

}  // namespace

Result<ClusterSpec> ParseClusterYaml(std::string_view yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return InvalidArgument(std::string("cluster YAML: ") + e.what());
  }
  if (!root.IsMap()) return InvalidArgument("cluster YAML: the document must be a mapping");
  ClusterSpec c;
  if (root["base"]) {
    FERRY_ASSIGN_OR_RETURN(c, ClusterPreset(root["base"].as<std::string>()));
  }
  const std::map<std::string, Setter> setters = ClusterSetters(c);
  for (const auto& entry : root) {
    const std::string key = entry.first.as<std::string>();
    if (key == "base") continue;
    FERRY_RETURN_IF_ERROR(ApplyClusterKey(key, entry.second, setters, c));
  }
  if (c.name.empty()) c.name = "custom";
  FERRY_RETURN_IF_ERROR(c.Validate());
  return c;
}

Result<ClusterSpec> LoadCluster(std::string_view preset_or_path) {
  for (const std::string& n : ClusterPresetNames()) {
    if (n == preset_or_path) return ClusterPreset(n);
  }
  const std::string path(preset_or_path);
  Result<std::string> text =
      ReadFileAtMost(path, kMaxClusterFileBytes, "cluster file", "kMaxClusterFileBytes");
  // A name with a directory or a YAML suffix was meant as a file: say why it could not be read.
  // Anything else was meant as a preset: name the presets (a file of that name does not exist).
  const bool looks_like_file = path.find('/') != std::string::npos || path.ends_with(".yaml") ||
                               path.ends_with(".yml");
  if (!text.ok() && text.status().code() == StatusCode::kIoError && !looks_like_file) {
    return ClusterPreset(preset_or_path).status();
  }
  if (!text.ok()) return text.status();
  return ParseClusterYaml(*text).WithContext("cluster file '" + path + "'");
}

RankMapping RankMapping::Identity(int num_ranks) {
  RankMapping m;
  m.gpu_of_rank.resize(num_ranks);
  for (int r = 0; r < num_ranks; ++r) m.gpu_of_rank[r] = r;
  return m;
}

Result<RankMapping> RankMapping::FromTopology(const Topology& topology,
                                              const ClusterSpec& cluster) {
  RankMapping m;
  m.gpu_of_rank.resize(topology.NumRanks());
  for (int r = 0; r < topology.NumRanks(); ++r) {
    const RankPlacement& p = topology.ranks[r];
    if (p.local_device < 0 || p.local_device >= cluster.RanksPerNode()) {
      return InvalidArgument("rank " + std::to_string(r) + " is on local device " +
                             std::to_string(p.local_device) + " but cluster '" + cluster.name +
                             "' has " + std::to_string(cluster.RanksPerNode()) + " ranks a node");
    }
    m.gpu_of_rank[r] = p.node * cluster.gpus_per_node + p.local_device / cluster.ranks_per_gpu;
  }
  return m;
}

Result<ClusterSpec> FitClusterToMapping(ClusterSpec cluster, const RankMapping& mapping) {
  FERRY_RETURN_IF_ERROR(cluster.Validate());
  int max_gpu = -1;
  for (size_t r = 0; r < mapping.gpu_of_rank.size(); ++r) {
    if (mapping.gpu_of_rank[r] < 0) {
      return InvalidArgument("rank " + std::to_string(r) + " is mapped to a negative GPU index");
    }
    max_gpu = std::max(max_gpu, mapping.gpu_of_rank[r]);
  }
  int needed_nodes = max_gpu / cluster.gpus_per_node + 1;
  if (cluster.num_nodes == 0) {
    cluster.num_nodes = needed_nodes;
  } else if (needed_nodes > cluster.num_nodes) {
    return InvalidArgument("the plan needs GPU " + std::to_string(max_gpu) + " but cluster '" +
                           cluster.name + "' has only " + std::to_string(cluster.TotalGpus()) +
                           " GPUs");
  }
  return cluster;
}

Topology TopologyForCluster(const ClusterSpec& cluster, int num_ranks) {
  Topology t = Topology::Uniform(num_ranks, cluster.RanksPerNode());
  for (int r = 0; r < num_ranks; ++r) {
    t.ranks[r].nics = {cluster.NicOfLocalGpu(t.ranks[r].local_device / cluster.ranks_per_gpu)};
  }
  t.nic_bandwidth = cluster.EffectiveNicBandwidth();
  t.intra_node_bandwidth = cluster.EffectiveNvlinkBandwidth();
  t.copy_bandwidth = cluster.copy_bandwidth;
  t.network_latency = cluster.nic_latency + cluster.nic_message_overhead;
  return t;
}

}  // namespace ferry::sim
