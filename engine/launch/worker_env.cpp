#include "engine/launch/worker_env.h"

#include <arpa/inet.h>
#include <sys/random.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <utility>

#include "engine/config/rules.h"
#include "engine/launch/dist_error.h"

namespace ptrain::dist {

namespace {

// Slurm's step ids from here up name special steps (batch script, extern, interactive), which are
// not srun worker steps (SLURM_MAX_NORMAL_STEP_ID in slurm.h).
constexpr std::uint64_t kSlurmMaxNormalStepId = 0xfffffff0u;
// Derived store ports lie in [20000, 50000), above the registered services most clusters run.
// This overlaps Linux's ephemeral range (32768+): a collision with an outgoing connection on rank
// 0's node costs a bind error, fixed by exporting MASTER_PORT.
constexpr int kDerivedPortBase = 20000;
constexpr int kDerivedPortSpan = 30000;

// Reads variables through the injected getenv; an empty value counts as unset, so that
// `export MASTER_ADDR=` behaves like not exporting it.
class Env {
 public:
  explicit Env(const GetenvFn& getenv_fn) : getenv_fn_(getenv_fn) {}

  std::optional<std::string> get(const char* name) const {
    const char* value = getenv_fn_(name);
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::string(value);
  }
  bool has(const char* name) const { return get(name).has_value(); }

 private:
  const GetenvFn& getenv_fn_;
};

std::string quoted(const std::string& name, const std::string& value) {
  return name + "=\"" + value + "\"";
}

// Strict decimal parse: the whole string, optional leading '-', no spaces, no '+', no suffix.
std::optional<long long> parse_decimal(const std::string& text) {
  long long value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [end, err] = std::from_chars(first, last, value);
  if (err != std::errc() || end != last || first == last) return std::nullopt;
  return value;
}

int parse_int(const std::string& name, const std::string& text) {
  const std::optional<long long> value = parse_decimal(text);
  if (!value || *value < INT_MIN || *value > INT_MAX) {
    throw LaunchConfigError(quoted(name, text) + " is not an integer");
  }
  return static_cast<int>(*value);
}

int require_int(const Env& env, const char* name, const std::string& context) {
  const std::optional<std::string> text = env.get(name);
  if (!text) throw LaunchConfigError(context + ", but " + name + " is not set");
  return parse_int(name, *text);
}

std::optional<int> optional_int(const Env& env, const char* name) {
  const std::optional<std::string> text = env.get(name);
  if (!text) return std::nullopt;
  return parse_int(name, *text);
}

// The names of the four rank variables of one launcher, for messages that say which one is wrong.
struct RankVars {
  const char* rank;
  const char* world;
  const char* local_rank;
  const char* local_world;
};

void check_ranks(const WorkerEnv& w, const RankVars& vars) {
  const auto name_value = [](const char* name, int value) {
    return std::string(name) + "=" + std::to_string(value);
  };
  if (w.world < 1) throw LaunchConfigError(name_value(vars.world, w.world) + " must be at least 1");
  // Named here: the job's own rule would blame --world / --nproc for what the launcher exported.
  if (w.world > config::kMaxWorld)
    throw LaunchConfigError(name_value(vars.world, w.world) + " is more than the " +
                            std::to_string(config::kMaxWorld) + " ranks a job may have");
  if (w.rank < 0 || w.rank >= w.world) {
    throw LaunchConfigError(name_value(vars.rank, w.rank) + " is outside [0, " +
                            name_value(vars.world, w.world) + ")");
  }
  if (w.local_world < 1 || w.local_world > w.world) {
    throw LaunchConfigError(name_value(vars.local_world, w.local_world) + " is outside [1, " +
                            name_value(vars.world, w.world) + "]");
  }
  if (w.local_rank < 0 || w.local_rank >= w.local_world) {
    throw LaunchConfigError(name_value(vars.local_rank, w.local_rank) + " is outside [0, " +
                            name_value(vars.local_world, w.local_world) + ")");
  }
}

// FNV-1a: a fixed, portable hash, so that every rank derives the same port and token from the
// same job ids without talking to each other.
std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t hash = 14695981039346656037ull;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

std::string hex64(std::uint64_t value) {
  static const char* digits = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i) {
    out[static_cast<std::size_t>(i)] = digits[value & 0xf];
    value >>= 4;
  }
  return out;
}

int derived_port(const std::string& job_key) {
  return kDerivedPortBase + static_cast<int>(fnv1a("ptrain-port:" + job_key) % kDerivedPortSpan);
}

std::string derived_token(const std::string& job_key) {
  return text_digest("ptrain-token:" + job_key);
}

std::string this_hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// ---------------------------------------------------------------- per-launcher rank variables

// Rank, world, local rank and local world from the four variables a launcher names, all required.
WorkerEnv named_ranks(const Env& env, const char* launcher, const std::string& context,
                      const std::array<const char*, 4>& names) {
  WorkerEnv w;
  w.launcher = launcher;
  w.rank = require_int(env, names[0], context);
  w.world = require_int(env, names[1], context);
  w.local_rank = require_int(env, names[2], context);
  w.local_world = require_int(env, names[3], context);
  check_ranks(w, {names[0], names[1], names[2], names[3]});
  return w;
}

WorkerEnv ptrain_ranks(const Env& env) {
  const std::string context = "PTRAIN_LAUNCHED=1 (spawned by `ptrain run`)";
  WorkerEnv w = named_ranks(env, "ptrain", context, {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"});
  if (const std::optional<int> fd = optional_int(env, "PTRAIN_STORE_FD")) {
    if (*fd < 0)
      throw LaunchConfigError(quoted("PTRAIN_STORE_FD", std::to_string(*fd)) + " is not a descriptor");
    if (w.rank != 0) {
      throw LaunchConfigError("PTRAIN_STORE_FD is only handed to rank 0, but RANK=" + std::to_string(w.rank));
    }
    w.store_fd = *fd;
  }
  for (const char* name : {"MASTER_ADDR", "MASTER_PORT", "PTRAIN_JOB_TOKEN"}) {
    if (!env.has(name)) throw LaunchConfigError(context + ", but " + name + " is not set");
  }
  return w;
}

WorkerEnv openmpi_ranks(const Env& env) {
  return named_ranks(env, "mpirun", "OMPI_COMM_WORLD_RANK is set (launched by Open MPI's mpirun)",
                     {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                      "OMPI_COMM_WORLD_LOCAL_SIZE"});
}

// The first of several variables that is set, with its name (launchers disagree on names).
std::optional<std::pair<const char*, int>> first_int(const Env& env,
                                                     std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (const std::optional<int> value = optional_int(env, name)) return std::make_pair(name, *value);
  }
  return std::nullopt;
}

WorkerEnv pmi_ranks(const Env& env) {
  const std::string context = "PMI_RANK is set (launched by an MPI launcher)";
  WorkerEnv w;
  w.launcher = "mpirun";
  w.rank = require_int(env, "PMI_RANK", context);
  w.world = require_int(env, "PMI_SIZE", context);
  RankVars vars{"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"};
  // Without local variables each rank is taken to be alone on its machine: the only layout in
  // which local rank 0 of 1 is right for every rank.
  if (const auto local_rank = first_int(env, {"MPI_LOCALRANKID", "PMI_LOCAL_RANK"})) {
    vars.local_rank = local_rank->first;
    w.local_rank = local_rank->second;
  }
  if (const auto local_world = first_int(env, {"MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"})) {
    vars.local_world = local_world->first;
    w.local_world = local_world->second;
  }
  check_ranks(w, vars);
  return w;
}

// The task count of this node: SLURM_NODEID indexes the step's per-node counts.
int slurm_local_world(const Env& env) {
  const char* name =
      env.has("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
  const std::optional<std::string> text = env.get(name);
  if (!text) throw LaunchConfigError("srun step detected, but SLURM_STEP_TASKS_PER_NODE is not set");
  std::vector<int> counts;
  try {
    counts = expand_slurm_tasks_per_node(*text);
  } catch (const LaunchConfigError& e) {
    throw LaunchConfigError(quoted(name, *text) + ": " + e.what());
  }
  const int node = optional_int(env, "SLURM_NODEID").value_or(0);
  if (node < 0 || static_cast<std::size_t>(node) >= counts.size()) {
    throw LaunchConfigError("SLURM_NODEID=" + std::to_string(node) + " has no entry in " +
                            quoted(name, *text));
  }
  return counts[static_cast<std::size_t>(node)];
}

WorkerEnv slurm_ranks(const Env& env) {
  const std::string context = "srun step detected (SLURM_STEP_NUM_TASKS is set)";
  WorkerEnv w;
  w.launcher = "srun";
  w.rank = require_int(env, "SLURM_PROCID", context);
  w.world = require_int(env, "SLURM_STEP_NUM_TASKS", context);
  w.local_rank = require_int(env, "SLURM_LOCALID", context);
  w.local_world = slurm_local_world(env);
  check_ranks(w, {"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE"});
  return w;
}

WorkerEnv generic_ranks(const Env& env) {
  const std::string context = "RANK or WORLD_SIZE is set (torchrun-style launch)";
  WorkerEnv w;
  w.launcher = "env";
  w.rank = require_int(env, "RANK", context);
  w.world = require_int(env, "WORLD_SIZE", context);
  // Without local variables all ranks are taken to run on this machine, the usual case for a
  // hand-written local launch; multi-machine launches set LOCAL_RANK/LOCAL_WORLD_SIZE.
  w.local_rank = optional_int(env, "LOCAL_RANK").value_or(w.rank);
  w.local_world = optional_int(env, "LOCAL_WORLD_SIZE").value_or(w.world);
  check_ranks(w, {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"});
  return w;
}

// ---------------------------------------------------------------- which launcher

bool slurm_worker_step(const Env& env) {
  if (!env.has("SLURM_PROCID") || !env.has("SLURM_STEP_NUM_TASKS")) return false;
  const std::optional<std::string> step = env.get("SLURM_STEP_ID");
  if (!step) return true;
  const std::optional<long long> id = parse_decimal(*step);
  if (!id || *id < 0) throw LaunchConfigError(quoted("SLURM_STEP_ID", *step) + " is not a step id");
  return static_cast<std::uint64_t>(*id) < kSlurmMaxNormalStepId;
}

// `srun --mpi=pmi2` exports PMI_RANK/PMI_SIZE equal to the Slurm task ids; Intel MPI's
// mpiexec.hydra inside an allocation starts one proxy per node with srun, so there the two differ
// and PMI has the ranks.
bool pmi_is_the_slurm_step(const Env& env) {
  return slurm_worker_step(env) && env.get("PMI_RANK") == env.get("SLURM_PROCID") &&
         env.get("PMI_SIZE") == env.get("SLURM_STEP_NUM_TASKS");
}

std::optional<WorkerEnv> detect_ranks(const Env& env) {
  if (const std::optional<std::string> launched = env.get("PTRAIN_LAUNCHED")) {
    if (*launched == "1") return ptrain_ranks(env);
    if (*launched != "0") throw LaunchConfigError(quoted("PTRAIN_LAUNCHED", *launched) + ": expected 1 or 0");
  }
  if (env.has("OMPI_COMM_WORLD_RANK")) return openmpi_ranks(env);
  if (env.has("PMI_RANK") && !pmi_is_the_slurm_step(env)) return pmi_ranks(env);
  if (slurm_worker_step(env)) return slurm_ranks(env);
  if (env.has("RANK") || env.has("WORLD_SIZE")) return generic_ranks(env);
  return std::nullopt;
}

// ---------------------------------------------------------------- store address, port, token

std::string slurm_store_host(const Env& env) {
  for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}) {
    const std::optional<std::string> list = env.get(name);
    if (!list) continue;
    std::vector<std::string> hosts;
    try {
      hosts = expand_slurm_hostlist(*list);
    } catch (const LaunchConfigError& e) {
      throw LaunchConfigError(quoted(name, *list) + ": " + e.what());
    }
    if (!hosts.empty()) return hosts.front();
  }
  throw LaunchConfigError(
      "srun step without SLURM_STEP_NODELIST or SLURM_JOB_NODELIST: export MASTER_ADDR=<host of rank 0>");
}

std::string store_host(const Env& env, const WorkerEnv& w) {
  if (const std::optional<std::string> addr = env.get("MASTER_ADDR")) {
    // Digits and dots only is meant as an IPv4 address: one that is not (256.1.1.1) would have the
    // other ranks retry it for the whole comm.timeout_s. A name is looked up when it is used.
    in_addr parsed{};
    const bool numeric = addr->find_first_not_of("0123456789.") == std::string::npos;
    if (numeric && ::inet_pton(AF_INET, addr->c_str(), &parsed) != 1)
      throw LaunchConfigError("MASTER_ADDR \"" + *addr +
                              "\" is not an IPv4 address (four numbers 0-255, without leading zeros)");
    return *addr;
  }
  if (w.launcher == "srun") return slurm_store_host(env);
  if (w.local_world == w.world) return "127.0.0.1";
  const std::string example =
      w.launcher == "mpirun" ? " (with Open MPI: mpirun -x MASTER_ADDR=<host of rank 0>)" : "";
  throw LaunchConfigError("the " + std::to_string(w.world) + " ranks span several machines (" +
                          std::to_string(w.local_world) +
                          " on this one) and MASTER_ADDR is not set: export MASTER_ADDR=<host of rank 0> to "
                          "every rank" +
                          example);
}

std::optional<std::string> slurm_step_key(const Env& env) {
  const std::optional<std::string> job = env.get("SLURM_JOB_ID");
  if (!job) return std::nullopt;
  return "slurm:" + *job + "." + env.get("SLURM_STEP_ID").value_or("");
}

// An id that names this job for every rank alike, from which port and token are derived. An MPI
// launcher without a job id of its own inside a Slurm allocation (MPICH/Intel MPI hydra start
// their proxies with one srun) is named by that srun step, which all its ranks share.
std::optional<std::string> job_key(const Env& env, const WorkerEnv& w) {
  if (w.launcher == "srun") return slurm_step_key(env);
  if (w.launcher == "mpirun") {
    for (const char* name : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"}) {
      if (const std::optional<std::string> id = env.get(name)) return std::string("mpi:") + name + "=" + *id;
    }
    return slurm_step_key(env);
  }
  return std::nullopt;
}

// srun --resv-ports (or MpiParams=ports) reserves ports for the step on all of its nodes, e.g.
// "12000-12003" or "12000,12007": the first one cannot collide with another step.
std::optional<int> slurm_reserved_port(const Env& env) {
  const std::optional<std::string> ports = env.get("SLURM_STEP_RESV_PORTS");
  if (!ports) return std::nullopt;
  return parse_port("SLURM_STEP_RESV_PORTS", ports->substr(0, ports->find_first_of("-,")));
}

int store_port(const Env& env, const WorkerEnv& w) {
  if (const std::optional<std::string> port = env.get("MASTER_PORT")) return parse_port("MASTER_PORT", *port);
  if (w.launcher == "srun") {
    if (const std::optional<int> reserved = slurm_reserved_port(env)) return *reserved;
  }
  if (const std::optional<std::string> key = job_key(env, w)) return derived_port(*key);
  throw LaunchConfigError(
      "MASTER_PORT is not set and " + w.launcher +
      " exports no job id to derive one from: export MASTER_PORT=<free port> to every rank");
}

// torchrun's rendezvous id: the same for every rank of a run, another for another run when the user
// gives one or --standalone draws one; "none" (its default) names nothing.
std::optional<std::string> torchelastic_run_key(const Env& env) {
  const std::optional<std::string> id = env.get("TORCHELASTIC_RUN_ID");
  if (!id || *id == "none") return std::nullopt;
  return "torchelastic:" + *id;
}

void assign_token(const Env& env, WorkerEnv& w) {
  if (const std::optional<std::string> token = env.get("PTRAIN_JOB_TOKEN")) {
    w.token = *token;
    w.token_from_env = true;
    return;
  }
  w.token_from_env = false;
  // Open MPI's mpirun hands every rank the same random per-job key: harder to guess than a job
  // id, but how far it is kept from other users is Open MPI's business, so it is not called
  // secret (token_from_env stays false).
  if (const std::optional<std::string> key = env.get("OMPI_MCA_orte_precondition_transports");
      key && w.launcher == "mpirun") {
    w.token = derived_token("ompi-transports:" + *key);
    return;
  }
  std::optional<std::string> key = job_key(env, w);
  if (!key && w.launcher == "env") key = torchelastic_run_key(env);
  if (key) {
    w.token = derived_token(*key);
    return;
  }
  // What is left (MASTER_ADDR:MASTER_PORT, the ranks) is the same for another job on the same
  // port: a token derived from it would let the two jobs join each other.
  const std::string launch =
      w.launcher == "env" ? "a torchrun-style launch (RANK, WORLD_SIZE, MASTER_*)" : "this MPI launcher";
  throw LaunchConfigError(
      "PTRAIN_JOB_TOKEN is not set, and nothing " + launch +
      " exports names this job: another job given the same store address " + w.store_host + ":" +
      std::to_string(w.store_port) +
      " could join it. Draw one token per job and export that same value to every rank, e.g. "
      "export PTRAIN_JOB_TOKEN=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \\n') where the "
      "job is launched (ptrain's own launcher, srun and mpirun name their jobs themselves)");
}

// ---------------------------------------------------------------- hostlists

// Splits at commas that are not inside brackets: "a[1,2],b" -> "a[1,2]", "b".
std::vector<std::string> split_top_level(const std::string& list) {
  std::vector<std::string> parts;
  std::string current;
  int depth = 0;
  for (const char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0) throw LaunchConfigError("unbalanced ']'");
    if (c == ',' && depth == 0) {
      parts.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  if (depth != 0) throw LaunchConfigError("unbalanced '['");
  parts.push_back(current);
  return parts;
}

bool all_digits(const std::string& text) {
  if (text.empty()) return false;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// "01-04,07" -> 01 02 03 04 07; the width of each range's lower bound is kept ("8-10" -> 8 9 10).
std::vector<std::string> expand_range_list(const std::string& ranges) {
  constexpr long long kMaxHosts = 1 << 20;
  std::vector<std::string> out;
  for (const std::string& item : split_top_level(ranges)) {
    const std::size_t dash = item.find('-');
    const std::string low = item.substr(0, dash);
    const std::string high = dash == std::string::npos ? low : item.substr(dash + 1);
    if (!all_digits(low) || !all_digits(high) || low.size() > 18 || high.size() > 18) {
      throw LaunchConfigError("bad range \"" + item + "\"");
    }
    const long long first = std::stoll(low);
    const long long last = std::stoll(high);
    if (last < first || last - first >= kMaxHosts) throw LaunchConfigError("bad range \"" + item + "\"");
    for (long long n = first; n <= last; ++n) {
      std::string digits = std::to_string(n);
      if (digits.size() < low.size()) digits.insert(0, low.size() - digits.size(), '0');
      out.push_back(digits);
    }
  }
  return out;
}

// One hostlist entry, possibly with several bracket groups: "r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2.
std::vector<std::string> expand_host_pattern(const std::string& pattern) {
  const std::size_t open = pattern.find('[');
  if (open == std::string::npos) return {pattern};
  const std::size_t close = pattern.find(']', open);
  if (close == std::string::npos) throw LaunchConfigError("unbalanced '['");
  const std::string prefix = pattern.substr(0, open);
  const std::vector<std::string> numbers = expand_range_list(pattern.substr(open + 1, close - open - 1));
  const std::vector<std::string> suffixes = expand_host_pattern(pattern.substr(close + 1));
  std::vector<std::string> out;
  for (const std::string& number : numbers) {
    for (const std::string& suffix : suffixes) out.push_back(prefix + number + suffix);
  }
  return out;
}

}  // namespace

int parse_port(const std::string& name, const std::string& text) {
  const std::optional<long long> value = parse_decimal(text);
  if (!value || *value < 1 || *value > 65535) {
    throw LaunchConfigError(quoted(name, text) + " is not a TCP port (1..65535)");
  }
  return static_cast<int>(*value);
}

std::vector<std::string> expand_slurm_hostlist(const std::string& hostlist) {
  std::vector<std::string> hosts;
  if (hostlist.empty()) return hosts;
  for (const std::string& entry : split_top_level(hostlist)) {
    if (entry.empty()) throw LaunchConfigError("empty host name in list");
    for (std::string& host : expand_host_pattern(entry)) hosts.push_back(std::move(host));
  }
  return hosts;
}

std::vector<int> expand_slurm_tasks_per_node(const std::string& counts) {
  std::vector<int> out;
  for (const std::string& item : split_top_level(counts)) {
    // "<count>" or "<count>(x<repeat>)"
    const std::size_t paren = item.find('(');
    const std::string count_text = item.substr(0, paren);
    int repeat = 1;
    if (paren != std::string::npos) {
      if (item.size() < paren + 4 || item.compare(paren, 2, "(x") != 0 || item.back() != ')') {
        throw LaunchConfigError("bad entry \"" + item + "\"");
      }
      const std::optional<long long> r = parse_decimal(item.substr(paren + 2, item.size() - paren - 3));
      if (!r || *r < 1 || *r > (1 << 20)) throw LaunchConfigError("bad repeat count in \"" + item + "\"");
      repeat = static_cast<int>(*r);
    }
    const std::optional<long long> count = parse_decimal(count_text);
    if (!count || *count < 0 || *count > INT_MAX)
      throw LaunchConfigError("bad task count in \"" + item + "\"");
    out.insert(out.end(), static_cast<std::size_t>(repeat), static_cast<int>(*count));
  }
  return out;
}

std::optional<WorkerEnv> detect_worker_env(const GetenvFn& getenv_fn) {
  const Env env(getenv_fn);
  std::optional<WorkerEnv> w = detect_ranks(env);
  if (!w) return std::nullopt;
  w->store_host = store_host(env, *w);
  w->store_port = store_port(env, *w);
  assign_token(env, *w);
  w->host = this_hostname();
  return w;
}

std::optional<WorkerEnv> detect_worker_env() {
  return detect_worker_env([](const char* name) -> const char* { return std::getenv(name); });
}

std::string text_digest(const std::string& text) {
  return hex64(fnv1a("ptrain-digest-a:" + text)) + hex64(fnv1a("ptrain-digest-b:" + text));
}

std::string new_job_token() {
  unsigned char bytes[16] = {};
  std::size_t filled = 0;
  while (filled < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      throw DistError(std::string("cannot draw a job token from the kernel (getrandom): ") +
                      std::strerror(err));
    }
    filled += static_cast<std::size_t>(n);
  }
  static const char* digits = "0123456789abcdef";
  std::string token;
  for (const unsigned char b : bytes) {
    token += digits[b >> 4];
    token += digits[b & 0xf];
  }
  return token;
}

}  // namespace ptrain::dist
