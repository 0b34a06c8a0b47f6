// A small structured-random fuzz driver for ferry's parsers, run as a bounded test in CI (and under
// ASan/UBSan in .ci/run): it feeds a target every input of its corpus in the repository, then
// mutations of them (byte flips, inserts, deletions, splices, and hostile tokens such as
// 9223372036854775807, -1, nan, 1e308) for a fixed time. Each target is a libFuzzer-style
// function, `int Target(const uint8_t* data, size_t size)`, so it can also be built with
// -fsanitize=fuzzer. On a crash the input being run is written to $TEST_UNDECLARED_OUTPUTS_DIR
// (or /tmp) as fuzz-crash-<target>, to be added to the corpus once fixed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ferry::fuzz {

using Target = int (*)(const uint8_t* data, size_t size);

struct FuzzOptions {
  std::string name;        // for the crash file and the summary line
  std::string corpus_dir;  // workspace-relative
  double seconds = 3;      // mutation time; FERRY_FUZZ_SECONDS overrides
  size_t max_size = 4096;  // longest mutated input
  uint64_t seed = 1;       // FERRY_FUZZ_SEED overrides
};

struct FuzzSummary {
  int corpus_inputs = 0;
  int64_t executions = 0;
};

// Runs the corpus, then mutations until the time is up. Returns what ran (a crash ends the
// process with the sanitizer's or the signal's report, after the crash file is written).
FuzzSummary RunFuzzer(Target target, const FuzzOptions& options);

}  // namespace ferry::fuzz
