// The fuzz driver: corpus replay, mutation loop, crash-input capture.
#include "tests/fuzz/fuzz_driver.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

namespace ferry::fuzz {
namespace {

using Input = std::vector<uint8_t>;

// The input being run and where to save it, for the crash handlers (no allocation there).
const Input* g_current = nullptr;
char g_crash_path[4096] = {};

void SaveCurrent() {
  if (g_current == nullptr || g_crash_path[0] == '\0') return;
  FILE* f = std::fopen(g_crash_path, "wb");
  if (f == nullptr) return;
  std::fwrite(g_current->data(), 1, g_current->size(), f);
  std::fclose(f);
  std::fprintf(stderr, "fuzz: the crashing input is in %s\n", g_crash_path);
}

void OnSignal(int signal) {
  SaveCurrent();
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

void InstallCrashHandlers(const std::string& name) {
  const char* dir = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/fuzz-crash-" + name;
  std::snprintf(g_crash_path, sizeof g_crash_path, "%s", path.c_str());
  if (__sanitizer_set_death_callback != nullptr) __sanitizer_set_death_callback(&SaveCurrent);
  for (int s : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) ::signal(s, &OnSignal);
}

std::vector<Input> LoadCorpus(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<Input> corpus;
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    std::string bytes = text.str();
    corpus.emplace_back(bytes.begin(), bytes.end());
  }
  return corpus;
}

// Tokens that break size arithmetic and number parsing when dropped into text or binary input.
const char* const kHostileTokens[] = {
    "9223372036854775807", "-9223372036854775808", "18446744073709551615", "4611686018427387904",
    "-1", "0", "1e308", "nan", "inf", "2147483648", "1000000000000", "[", "]", "{", "}", ":",
    "\n", "'", "[0:1000000000000]", "\xff\xff\xff\xff", "\x00\x00\x00\x80"};

Input Mutate(const std::vector<Input>& corpus, std::mt19937_64& rng, size_t max_size) {
  Input in = corpus.empty() ? Input{} : corpus[rng() % corpus.size()];
  const int steps = 1 + static_cast<int>(rng() % 4);
  for (int s = 0; s < steps; ++s) {
    const size_t at = in.empty() ? 0 : rng() % (in.size() + 1);
    switch (rng() % 6) {
      case 0:  // flip a byte
        if (!in.empty()) in[rng() % in.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 1:  // random byte
        in.insert(in.begin() + static_cast<std::ptrdiff_t>(at), static_cast<uint8_t>(rng()));
        break;
      case 2: {  // delete a run
        if (in.empty()) break;
        size_t from = rng() % in.size();
        size_t count = std::min<size_t>(1 + rng() % 16, in.size() - from);
        in.erase(in.begin() + static_cast<std::ptrdiff_t>(from),
                 in.begin() + static_cast<std::ptrdiff_t>(from + count));
        break;
      }
      case 3: {  // a hostile token, replacing a short run
        const char* token = kHostileTokens[rng() % (sizeof kHostileTokens / sizeof *kHostileTokens)];
        size_t len = std::max<size_t>(std::strlen(token), 1);
        size_t drop = in.empty() ? 0 : std::min<size_t>(rng() % 8, in.size() - std::min(at, in.size()));
        in.erase(in.begin() + static_cast<std::ptrdiff_t>(at), in.begin() + static_cast<std::ptrdiff_t>(at + drop));
        in.insert(in.begin() + static_cast<std::ptrdiff_t>(at), token, token + len);
        break;
      }
      case 4: {  // splice in part of another corpus input
        if (corpus.empty()) break;
        const Input& other = corpus[rng() % corpus.size()];
        if (other.empty()) break;
        size_t from = rng() % other.size();
        size_t count = std::min<size_t>(1 + rng() % 64, other.size() - from);
        in.insert(in.begin() + static_cast<std::ptrdiff_t>(at), other.begin() + static_cast<std::ptrdiff_t>(from),
                  other.begin() + static_cast<std::ptrdiff_t>(from + count));
        break;
      }
      default:  // duplicate a run (repeated keys, long lists)
        if (!in.empty()) {
          size_t from = rng() % in.size();
          size_t count = std::min<size_t>(1 + rng() % 32, in.size() - from);
          Input run(in.begin() + static_cast<std::ptrdiff_t>(from), in.begin() + static_cast<std::ptrdiff_t>(from + count));
          in.insert(in.begin() + static_cast<std::ptrdiff_t>(at), run.begin(), run.end());
        }
    }
  }
  if (in.size() > max_size) in.resize(max_size);
  return in;
}

void RunOne(Target target, const Input& input) {
  g_current = &input;
  target(input.data(), input.size());
  g_current = nullptr;
}

}  // namespace

FuzzSummary RunFuzzer(Target target, const FuzzOptions& options) {
  InstallCrashHandlers(options.name);
  double seconds = options.seconds;
  if (const char* text = std::getenv("FERRY_FUZZ_SECONDS")) seconds = std::atof(text);
  uint64_t seed = options.seed;
  if (const char* text = std::getenv("FERRY_FUZZ_SEED")) seed = std::strtoull(text, nullptr, 10);
  FuzzSummary summary;
  const std::vector<Input> corpus = LoadCorpus(options.corpus_dir);
  summary.corpus_inputs = static_cast<int>(corpus.size());
  for (const Input& input : corpus) {
    RunOne(target, input);
    ++summary.executions;
  }
  std::mt19937_64 rng(seed);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    Input input = Mutate(corpus, rng, options.max_size);
    RunOne(target, input);
    ++summary.executions;
  }
  std::printf("fuzz %s: %d corpus inputs, %lld executions in %.1f s (seed %llu)\n",
              options.name.c_str(), summary.corpus_inputs,
              static_cast<long long>(summary.executions), seconds,
              static_cast<unsigned long long>(seed));
  return summary;
}

}  // namespace ferry::fuzz
