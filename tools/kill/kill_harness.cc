// ferry-kill-harness: for each transport, direct reads on and off, and each fault (kill or stop,
// mid-refit or between refits), runs `ferry run` --runs times with that fault injected into one
// rank and prints a Markdown table of the time from the fault to the last survivor's exit
// (p50/p99/max), whether every survivor named the faulty rank, and whether all left on their own.
//
//   bazel run -c opt //tools/kill:kill_harness -- --ferry $PWD/bazel-bin/tools/cli/ferry --runs 20
//   options: --transports tcp,ucx,libfabric --faults kill:mid,kill:between,stop:mid,stop:between
//            --rank 2 --peer-dead 5 --store-host launcher|rank0 (who serves the store)
// Exits 1 when any trial failed to run, was not named, or needed the launcher to end a survivor.
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "tools/kill/kill_trial.h"

namespace {

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) parts.push_back(part);
  return parts;
}

struct Args {
  std::string ferry = "bazel-bin/tools/cli/ferry";
  int runs = 10;
  std::vector<std::string> transports{"tcp", "ucx", "libfabric"};
  std::vector<std::string> faults{"kill:mid", "kill:between", "stop:mid", "stop:between"};
  int rank = 2;
  double peer_dead = 5;
  std::string store_host = "launcher";
};

bool Parse(int argc, char** argv, Args& args) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--ferry") args.ferry = value;
    else if (flag == "--runs") args.runs = std::atoi(value.c_str());
    else if (flag == "--transports") args.transports = Split(value);
    else if (flag == "--faults") args.faults = Split(value);
    else if (flag == "--rank") args.rank = std::atoi(value.c_str());
    else if (flag == "--peer-dead") args.peer_dead = std::atof(value.c_str());
    else if (flag == "--store-host") args.store_host = value;
    else return false;
  }
  return argc % 2 == 1 && args.runs > 0 && args.rank >= 0 && args.rank < 8 && args.peer_dead > 0 &&
         (args.store_host == "launcher" || args.store_host == "rank0");
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!Parse(argc, argv, args)) {
    std::fprintf(stderr, "usage: kill_harness [--ferry PATH] [--runs N] [--transports a,b] "
                         "[--faults kill:mid,stop:between] [--rank R<8] [--peer-dead SECONDS] "
                         "[--store-host launcher|rank0]\n");
    return 2;
  }
  bool all_good = true;
  std::printf("| transport | direct reads | fault | runs | p50 s | p99 s | max s | culprit named | "
              "survivors left on their own |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& transport : args.transports) {
    for (bool direct : {true, false}) {
      for (const std::string& fault : args.faults) {
        ferry::kill::TrialSpec spec;
        spec.ferry = args.ferry;
        spec.transport = transport;
        spec.direct_reads = direct;
        spec.rank = args.rank;
        spec.fault = fault.substr(0, fault.find(':'));
        spec.moment = fault.substr(fault.find(':') + 1);
        spec.peer_dead_s = args.peer_dead;
        spec.store_host = args.store_host;
        std::vector<double> seconds;
        int named = 0, on_own = 0;
        for (int run = 0; run < args.runs; ++run) {
          auto trial = ferry::kill::RunTrial(spec);
          if (!trial.ok()) {
            std::fprintf(stderr, "%s\n", trial.status().ToString().c_str());
            all_good = false;
            continue;
          }
          seconds.push_back(trial->seconds);
          named += trial->named;
          on_own += trial->on_their_own;
        }
        all_good = all_good && named == args.runs && on_own == args.runs;
        std::printf("| %s | %s | %s | %d | %.2f | %.2f | %.2f | %d/%d | %d/%d |\n", transport.c_str(),
                    direct ? "on" : "off", fault.c_str(), args.runs,
                    ferry::kill::Quantile(seconds, 0.5), ferry::kill::Quantile(seconds, 0.99),
                    ferry::kill::Quantile(seconds, 1.0), named, args.runs, on_own, args.runs);
        std::fflush(stdout);
      }
    }
  }
  return all_good ? 0 : 1;
}
