// Tests of ProgressReporter: a stage longer than the interval prints lines naming it, with the
// simulation's position when given (or that it is still setting up); a stage shorter than the
// interval, and a disabled reporter, print nothing.
#include "tools/cli/progress_reporter.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <sstream>
#include <streambuf>
#include <string>
#include <thread>

namespace ferry::cli {
namespace {

using std::chrono::milliseconds;

// A stream buffer the test reads while the reporter's thread writes.
class SharedText : public std::stringbuf {
 public:
  std::string Text() {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return str();
  }

 protected:
  int sync() override { return 0; }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return std::stringbuf::xsputn(s, n);
  }
  int_type overflow(int_type c) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return std::stringbuf::overflow(c);
  }

 private:
  std::recursive_mutex mu_;  // xsputn may call overflow
};

// Waits (up to 20 s, for a loaded machine) until `text` holds a full line, and returns it.
std::string FirstLine(SharedText& text) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string all = text.Text();
    const size_t end = all.find('\n');
    if (end != std::string::npos) return all.substr(0, end);
    std::this_thread::sleep_for(milliseconds(2));
  }
  return "";
}

TEST(ProgressReporter, ALongStageGetsLinesNamingIt) {
  SharedText text;
  std::ostream out(&text);
  ProgressReporter progress("ferry simulate", out, milliseconds(10));
  progress.Begin("planning reshard");
  const std::string line = FirstLine(text);
  progress.End();
  EXPECT_EQ(line.rfind("ferry simulate: planning reshard: ", 0), 0u) << line;
  EXPECT_EQ(line.substr(line.size() - 2), " s") << line;
}

TEST(ProgressReporter, ASimulationLineSaysWhereTheSimulationIs) {
  SharedText text;
  std::ostream out(&text);
  sim::SimProgress where;
  where.ops_total = 4'980'000;
  where.ops_done = 1'245'000;
  where.simulated_seconds = 0.3124;
  ProgressReporter progress("ferry simulate", out, milliseconds(10));
  progress.Begin("simulating reshard", &where);
  const std::string line = FirstLine(text);
  progress.End();
  EXPECT_EQ(line.rfind("ferry simulate: simulating reshard: 1.25 M of 4.98 M ops (25%), "
                       "312.4 ms simulated, ",
                       0),
            0u)
      << line;
}

TEST(ProgressReporter, ASimulationNotYetStartedIsSettingUp) {
  SharedText text;
  std::ostream out(&text);
  sim::SimProgress where;
  ProgressReporter progress("ferry simulate", out, milliseconds(10));
  progress.Begin("simulating gather-broadcast", &where);
  const std::string line = FirstLine(text);
  progress.End();
  EXPECT_EQ(line.rfind("ferry simulate: simulating gather-broadcast: setting up, ", 0), 0u) << line;
}

TEST(ProgressReporter, AShortStagePrintsNothing) {
  SharedText text;
  std::ostream out(&text);
  {
    ProgressReporter progress("ferry simulate", out, std::chrono::hours(1));
    progress.Begin("planning reshard");
    std::this_thread::sleep_for(milliseconds(30));
    progress.End();
  }
  EXPECT_EQ(text.Text(), "");
}

TEST(ProgressReporter, ADisabledReporterPrintsNothing) {
  SharedText text;
  std::ostream out(&text);
  {
    ProgressReporter progress("ferry simulate", out, milliseconds(0));
    progress.Begin("planning reshard");
    std::this_thread::sleep_for(milliseconds(30));
    progress.End();
  }
  EXPECT_EQ(text.Text(), "");
}

}  // namespace
}  // namespace ferry::cli
