// libFuzzer target: the launcher's plan of the job (nodes, node rank, where the rendezvous is)
// from a command line and an environment, as distrun reads them before any rendezvous. The
// input is the command line (arguments separated by NUL) up to the first "\n\n", then
// KEY=VALUE lines (SLURM_*, OMPI_*, PMI_*, MASTER_*, ...). Any input must give either a
// consistent plan or a ConfigError: no other exception, crash, hang or leak.
// (The plan message node 0 publishes through the rendezvous is fuzz_rendezvous's.)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "distrun/core/error.hpp"
#include "job_plan.hpp"
#include "options.hpp"

using namespace distrun;
using namespace distrun::launcher;

// --help and --version print to stdout: not worth the time of every run.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (!std::freopen("/dev/null", "w", stdout)) std::abort();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  size_t split = in.find("\n\n");
  std::string cmd = in.substr(0, split), envtext = split == std::string::npos ? "" : in.substr(split + 2);
  std::vector<std::string> args = {"distrun"};
  size_t from = 0;
  for (size_t i = 0; i <= cmd.size(); ++i)
    if (i == cmd.size() || cmd[i] == '\0') {
      args.push_back(cmd.substr(from, i - from));
      from = i + 1;
    }
  std::map<std::string, std::string> env;
  size_t line = 0;
  while (line < envtext.size()) {
    size_t end = envtext.find('\n', line);
    if (end == std::string::npos) end = envtext.size();
    std::string kv = envtext.substr(line, end - line);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    line = end + 1;
  }
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  try {
    ParseResult r = parse_launch_options(int(argv.size()), argv.data());
    if (r.exit_now) return 0;
    // "gpu"/"auto" would ask CUDA for its devices on every input: not what is fuzzed here.
    if (r.options.nproc_per_node == "gpu" || r.options.nproc_per_node == "auto") r.options.nproc_per_node = "cpu";
    JobPlan p = plan_job(
        r.options,
        [&](const std::string& k) -> std::optional<std::string> {
          auto it = env.find(k);
          if (it == env.end()) return std::nullopt;
          return it->second;
        },
        std::nullopt);
    if (p.nnodes < 1 || p.node_rank < 0 || p.node_rank >= p.nnodes || p.nproc_per_node < 1) std::abort();
    if (p.nnodes > 1 && (!p.master_port || p.master_addr.empty())) std::abort();
  } catch (const ConfigError&) {
  }
  return 0;
}
