// Worker identity from launcher variables: fake environments for every launcher kind, the
// precedence between them, store address/port/token rules, and every error.
#include "engine/launch/worker_env.h"

#include <catch2/catch.hpp>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/launch/dist_error.h"

using namespace ptrain::dist;
using Vars = std::map<std::string, std::string>;

namespace {

std::optional<WorkerEnv> detect(const Vars& vars) {
  return detect_worker_env([&vars](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

WorkerEnv detect_some(const Vars& vars) {
  const std::optional<WorkerEnv> w = detect(vars);
  REQUIRE(w.has_value());
  return *w;
}

// The LaunchConfigError message for `vars`, or "" if none was thrown.
std::string error_of(const Vars& vars) {
  try {
    detect(vars);
  } catch (const LaunchConfigError& e) {
    return e.what();
  }
  return "";
}

bool is_hex_token(const std::string& token) {
  return token.size() == 32 && token.find_first_not_of("0123456789abcdef") == std::string::npos;
}

Vars with(Vars vars, const Vars& more) {
  for (const auto& [k, v] : more) vars[k] = v;
  return vars;
}

Vars without(Vars vars, const std::string& name) {
  vars.erase(name);
  return vars;
}

const Vars kPtrain = {{"PTRAIN_LAUNCHED", "1"},  {"RANK", "0"},
                      {"WORLD_SIZE", "4"},       {"LOCAL_RANK", "0"},
                      {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "127.0.0.1"},
                      {"MASTER_PORT", "29500"},  {"PTRAIN_JOB_TOKEN", "0123abcd"},
                      {"PTRAIN_STORE_FD", "7"}};

// What Open MPI 4.1's mpirun exports to rank 1 of 2 on one machine (abridged, real names).
const Vars kOpenMpi = {{"OMPI_COMM_WORLD_RANK", "1"},
                       {"OMPI_COMM_WORLD_SIZE", "2"},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                       {"OMPI_MCA_ess_base_jobid", "1656422401"},
                       {"PMIX_NAMESPACE", "1656422401"},
                       {"PMIX_RANK", "1"},
                       {"OMPI_MCA_orte_precondition_transports", "8ae18f3f71d2ecf1-8cd0d6e4a6441f15"}};

// What srun exports to task 5 of `srun -N3 -n11` (4+4+3 tasks), on the second node.
const Vars kSrun = {{"SLURM_JOB_ID", "4242"},
                    {"SLURM_STEP_ID", "0"},
                    {"SLURM_PROCID", "5"},
                    {"SLURM_LOCALID", "1"},
                    {"SLURM_NODEID", "1"},
                    {"SLURM_STEP_NUM_TASKS", "11"},
                    {"SLURM_NTASKS", "11"},
                    {"SLURM_STEP_TASKS_PER_NODE", "4(x2),3"},
                    {"SLURM_TASKS_PER_NODE", "4(x2),3"},
                    {"SLURM_STEP_NODELIST", "gpu[07-08],cpu3"},
                    {"SLURM_JOB_NODELIST", "gpu[01-08],cpu3"}};

// What an sbatch batch script sees before it calls srun: task-like variables, no step variables.
const Vars kSbatchScript = {{"SLURM_JOB_ID", "4242"},
                            {"SLURM_PROCID", "0"},
                            {"SLURM_LOCALID", "0"},
                            {"SLURM_NODEID", "0"},
                            {"SLURM_NTASKS", "8"},
                            {"SLURM_NPROCS", "8"},
                            {"SLURM_TASKS_PER_NODE", "4(x2)"},
                            {"SLURM_JOB_NODELIST", "gpu[01-02]"},
                            {"ENVIRONMENT", "BATCH"}};

// What torchrun exports to rank 3 of 8 (abridged; its default rendezvous id is "none").
const Vars kTorchrun = {{"RANK", "3"},
                        {"WORLD_SIZE", "8"},
                        {"LOCAL_RANK", "3"},
                        {"LOCAL_WORLD_SIZE", "4"},
                        {"MASTER_ADDR", "node0"},
                        {"MASTER_PORT", "29400"},
                        {"TORCHELASTIC_RUN_ID", "none"}};
// A torchrun-style launch that hands every rank the job's token.
const Vars kTorchrunWithToken = with(kTorchrun, {{"PTRAIN_JOB_TOKEN", "fresh-per-job"}});

}  // namespace

TEST_CASE("no launcher variables: this process is the launcher") {
  CHECK_FALSE(detect({}).has_value());
  CHECK_FALSE(detect({{"HOME", "/root"}, {"PATH", "/usr/bin"}, {"MASTER_ADDR", "10.0.0.1"}}).has_value());
  CHECK_FALSE(detect({{"PTRAIN_LAUNCHED", "0"}}).has_value());
}

TEST_CASE("a worker of the local launcher reads every variable the launcher sets") {
  const WorkerEnv w = detect_some(kPtrain);
  CHECK(w.launcher == "ptrain");
  CHECK(w.rank == 0);
  CHECK(w.world == 4);
  CHECK(w.local_rank == 0);
  CHECK(w.local_world == 4);
  CHECK(w.store_host == "127.0.0.1");
  CHECK(w.store_port == 29500);
  CHECK(w.token == "0123abcd");
  CHECK(w.token_from_env);
  CHECK(w.store_fd == 7);
  CHECK_FALSE(w.host.empty());

  const WorkerEnv rank2 =
      detect_some(with(without(kPtrain, "PTRAIN_STORE_FD"), {{"RANK", "2"}, {"LOCAL_RANK", "2"}}));
  CHECK(rank2.rank == 2);
  CHECK(rank2.store_fd == -1);
}

TEST_CASE("a local-launcher worker with a missing or stray variable is refused") {
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                           "MASTER_PORT", "PTRAIN_JOB_TOKEN"}) {
    INFO(name);
    const std::string message = error_of(without(kPtrain, name));
    CHECK_THAT(message, Catch::Contains(name) && Catch::Contains("not set"));
  }
  CHECK_THAT(error_of(with(kPtrain, {{"RANK", "1"}, {"LOCAL_RANK", "1"}})),
             Catch::Contains("PTRAIN_STORE_FD is only handed to rank 0"));
  CHECK_THAT(error_of(with(kPtrain, {{"PTRAIN_STORE_FD", "-3"}})), Catch::Contains("PTRAIN_STORE_FD"));
  CHECK_THAT(error_of(with(kPtrain, {{"PTRAIN_LAUNCHED", "yes"}})),
             Catch::Contains("PTRAIN_LAUNCHED=\"yes\""));
}

TEST_CASE("the most specific launcher wins when several sets of variables are present") {
  // The local launcher's workers may run inside an srun step or an mpirun job.
  CHECK(detect_some(with(with(kSrun, kOpenMpi), kPtrain)).launcher == "ptrain");
  // mpirun inside an allocation starts its daemons with srun: the ranks carry the daemons' step.
  const WorkerEnv under_slurm = detect_some(with(kSrun, kOpenMpi));
  CHECK(under_slurm.launcher == "mpirun");
  CHECK(under_slurm.rank == 1);
  CHECK(under_slurm.world == 2);
  // Intel MPI's hydra inside an allocation: one srun task per node, PMI holds the real ranks.
  const WorkerEnv hydra = detect_some(with(kSrun, {{"PMI_RANK", "9"},
                                                   {"PMI_SIZE", "16"},
                                                   {"MPI_LOCALRANKID", "1"},
                                                   {"MPI_LOCALNRANKS", "8"},
                                                   {"MASTER_ADDR", "gpu07"}}));
  CHECK(hydra.launcher == "mpirun");
  CHECK(hydra.rank == 9);
  CHECK(hydra.local_world == 8);
  // srun --mpi=pmi2 exports PMI_RANK/PMI_SIZE equal to the Slurm task ids: it is the srun step.
  const WorkerEnv pmi2 = detect_some(with(kSrun, {{"PMI_RANK", "5"}, {"PMI_SIZE", "11"}}));
  CHECK(pmi2.launcher == "srun");
  CHECK(pmi2.store_host == "gpu07");
  // Slurm step variables beat generic RANK/WORLD_SIZE.
  CHECK(detect_some(with(kSrun, {{"RANK", "0"}, {"WORLD_SIZE", "1"}})).launcher == "srun");
}

TEST_CASE("Open MPI ranks on one machine need no address, port or token") {
  const WorkerEnv w = detect_some(kOpenMpi);
  CHECK(w.launcher == "mpirun");
  CHECK(w.rank == 1);
  CHECK(w.world == 2);
  CHECK(w.local_rank == 1);
  CHECK(w.local_world == 2);
  CHECK(w.store_host == "127.0.0.1");
  CHECK(w.store_port >= 20000);
  CHECK(w.store_port < 50000);
  CHECK(is_hex_token(w.token));
  CHECK_FALSE(w.token_from_env);  // derived from Open MPI's per-job random key
  CHECK(w.store_fd == -1);

  // Every rank of the job derives the same port and token.
  const WorkerEnv rank0 =
      detect_some(with(kOpenMpi, {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}}));
  CHECK(rank0.store_port == w.store_port);
  CHECK(rank0.token == w.token);
  // Another job, another token.
  const WorkerEnv other = detect_some(
      with(kOpenMpi, {{"OMPI_MCA_orte_precondition_transports", "1-2"}, {"PMIX_NAMESPACE", "77"}}));
  CHECK(other.token != w.token);
}

TEST_CASE("Open MPI without its random key derives the token from the job id") {
  const Vars vars = without(kOpenMpi, "OMPI_MCA_orte_precondition_transports");
  const WorkerEnv w = detect_some(vars);
  CHECK(is_hex_token(w.token));
  CHECK_FALSE(w.token_from_env);
  CHECK(w.token != detect_some(kOpenMpi).token);
  CHECK(detect_some(with(kOpenMpi, {{"PTRAIN_JOB_TOKEN", "mine"}})).token_from_env);
  // Open MPI 4 exports the job id twice; either one alone gives the port.
  CHECK(detect_some(without(vars, "PMIX_NAMESPACE")).store_port >= 20000);
  CHECK(detect_some(without(vars, "OMPI_MCA_ess_base_jobid")).store_port >= 20000);
  CHECK_THAT(error_of(without(without(vars, "PMIX_NAMESPACE"), "OMPI_MCA_ess_base_jobid")),
             Catch::Contains("MASTER_PORT is not set"));
}

TEST_CASE("Open MPI across machines needs MASTER_ADDR") {
  const Vars two_nodes =
      with(kOpenMpi, {{"OMPI_COMM_WORLD_SIZE", "16"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "8"}});
  CHECK_THAT(error_of(two_nodes),
             Catch::Contains("export MASTER_ADDR") && Catch::Contains("mpirun -x MASTER_ADDR"));
  const WorkerEnv w = detect_some(with(two_nodes, {{"MASTER_ADDR", "node0"}, {"MASTER_PORT", "31000"}}));
  CHECK(w.store_host == "node0");
  CHECK(w.store_port == 31000);
}

TEST_CASE("PMI launchers: local ranks from MPICH or PMI names, else one rank per machine") {
  const Vars mpich_vars = {{"PMI_RANK", "3"},
                           {"PMI_SIZE", "4"},
                           {"MPI_LOCALRANKID", "3"},
                           {"MPI_LOCALNRANKS", "4"},
                           {"MASTER_PORT", "29000"}};
  // MPICH's hydra outside Slurm exports no job id: like a torchrun-style launch, it needs a token.
  CHECK_THAT(error_of(mpich_vars), Catch::Contains("PTRAIN_JOB_TOKEN is not set"));
  const WorkerEnv mpich = detect_some(with(mpich_vars, {{"PTRAIN_JOB_TOKEN", "t"}}));
  CHECK(mpich.launcher == "mpirun");
  CHECK(mpich.local_rank == 3);
  CHECK(mpich.local_world == 4);
  CHECK(mpich.store_host == "127.0.0.1");
  CHECK(mpich.token_from_env);

  const WorkerEnv pmi = detect_some({{"PMI_RANK", "1"},
                                     {"PMI_SIZE", "2"},
                                     {"PMI_LOCAL_RANK", "1"},
                                     {"PMI_LOCAL_SIZE", "2"},
                                     {"PMIX_NAMESPACE", "job7"}});
  CHECK(pmi.local_rank == 1);
  CHECK(pmi.store_port >= 20000);

  const WorkerEnv bare = detect_some({{"PMI_RANK", "2"},
                                      {"PMI_SIZE", "4"},
                                      {"MASTER_ADDR", "h0"},
                                      {"MASTER_PORT", "1"},
                                      {"PTRAIN_JOB_TOKEN", "t"}});
  CHECK(bare.local_rank == 0);
  CHECK(bare.local_world == 1);
  CHECK_THAT(error_of({{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}, {"MASTER_PORT", "1"}}),
             Catch::Contains("MASTER_ADDR"));
  CHECK_THAT(error_of({{"PMI_RANK", "0"}, {"PMI_SIZE", "1"}}), Catch::Contains("export MASTER_PORT"));
  CHECK_THAT(
      error_of({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "2"}, {"MPI_LOCALNRANKS", "2"}}),
      Catch::Contains("MPI_LOCALRANKID=2"));
}

TEST_CASE("an srun task finds its node's task count, the store on the step's first node, a job port") {
  const WorkerEnv w = detect_some(kSrun);
  CHECK(w.launcher == "srun");
  CHECK(w.rank == 5);
  CHECK(w.world == 11);
  CHECK(w.local_rank == 1);
  CHECK(w.local_world == 4);
  CHECK(w.store_host == "gpu07");  // the step's nodes, not the job's
  CHECK(w.store_port >= 20000);
  CHECK(w.store_port < 50000);
  CHECK(is_hex_token(w.token));
  CHECK_FALSE(w.token_from_env);

  const WorkerEnv last_node =
      detect_some(with(kSrun, {{"SLURM_PROCID", "9"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "2"}}));
  CHECK(last_node.local_world == 3);
  CHECK(last_node.store_port == w.store_port);
  CHECK(last_node.token == w.token);

  // Another step of the same job must not meet this one's store.
  const WorkerEnv step1 = detect_some(with(kSrun, {{"SLURM_STEP_ID", "1"}}));
  CHECK(step1.token != w.token);

  // Explicit settings win; reserved ports beat the derived one.
  const WorkerEnv set = detect_some(
      with(kSrun, {{"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "12345"}, {"PTRAIN_JOB_TOKEN", "secret"}}));
  CHECK(set.store_host == "10.1.2.3");
  CHECK(set.store_port == 12345);
  CHECK(set.token == "secret");
  CHECK(set.token_from_env);
  CHECK(detect_some(with(kSrun, {{"SLURM_STEP_RESV_PORTS", "12000-12003"}})).store_port == 12000);
  CHECK(detect_some(with(kSrun, {{"SLURM_STEP_RESV_PORTS", "12007,12010"}})).store_port == 12007);

  // Older or trimmed environments: the job's node list and per-node counts.
  const Vars job_only = without(without(kSrun, "SLURM_STEP_NODELIST"), "SLURM_STEP_TASKS_PER_NODE");
  CHECK(detect_some(job_only).store_host == "gpu01");
  CHECK(detect_some(without(kSrun, "SLURM_NODEID")).local_world == 4);
}

TEST_CASE("a batch script or a special Slurm step is not a worker") {
  CHECK_FALSE(detect(kSbatchScript).has_value());
  // The interactive step (salloc's shell) and the batch step carry special step ids.
  CHECK_FALSE(detect(with(kSrun, {{"SLURM_STEP_ID", "4294967290"}})).has_value());
  CHECK_FALSE(detect(with(kSrun, {{"SLURM_STEP_ID", "4294967291"}})).has_value());
  CHECK(detect(with(kSrun, {{"SLURM_STEP_ID", "4294967279"}})).has_value());
}

TEST_CASE("malformed Slurm variables are named in the error") {
  CHECK_THAT(error_of(with(kSrun, {{"SLURM_NODEID", "3"}})), Catch::Contains("SLURM_NODEID=3"));
  CHECK_THAT(error_of(with(kSrun, {{"SLURM_STEP_TASKS_PER_NODE", "4(x"}})),
             Catch::Contains("SLURM_STEP_TASKS_PER_NODE=\"4(x\""));
  CHECK_THAT(error_of(with(kSrun, {{"SLURM_STEP_NODELIST", "gpu[07-"}})),
             Catch::Contains("SLURM_STEP_NODELIST"));
  CHECK_THAT(error_of(with(kSrun, {{"SLURM_STEP_ID", "x"}})), Catch::Contains("SLURM_STEP_ID=\"x\""));
  CHECK_THAT(error_of(with(kSrun, {{"SLURM_STEP_RESV_PORTS", "70000-70001"}})),
             Catch::Contains("SLURM_STEP_RESV_PORTS"));
  CHECK_THAT(error_of(without(kSrun, "SLURM_LOCALID")), Catch::Contains("SLURM_LOCALID is not set"));
  CHECK_THAT(error_of(with(kSrun, {{"SLURM_LOCALID", "4"}})), Catch::Contains("SLURM_LOCALID=4"));
  const Vars no_nodes = without(without(kSrun, "SLURM_STEP_NODELIST"), "SLURM_JOB_NODELIST");
  CHECK_THAT(error_of(no_nodes), Catch::Contains("MASTER_ADDR"));
  CHECK_THAT(error_of(without(kSrun, "SLURM_JOB_ID")), Catch::Contains("MASTER_PORT"));
}

TEST_CASE("torchrun-style RANK/WORLD_SIZE") {
  const WorkerEnv w = detect_some(kTorchrunWithToken);
  CHECK(w.launcher == "env");
  CHECK(w.rank == 3);
  CHECK(w.world == 8);
  CHECK(w.local_rank == 3);
  CHECK(w.local_world == 4);
  CHECK(w.store_host == "node0");
  CHECK(w.store_port == 29400);
  CHECK(w.token == "fresh-per-job");
  CHECK(w.token_from_env);

  // Without local variables all ranks are taken to be on this machine.
  const WorkerEnv local =
      detect_some({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29400"}, {"PTRAIN_JOB_TOKEN", "t"}});
  CHECK(local.local_rank == 1);
  CHECK(local.local_world == 2);
  CHECK(local.store_host == "127.0.0.1");

  CHECK_THAT(error_of(without(kTorchrunWithToken, "MASTER_PORT")), Catch::Contains("export MASTER_PORT"));
  CHECK_THAT(error_of(without(kTorchrunWithToken, "MASTER_ADDR")), Catch::Contains("MASTER_ADDR is not set"));
  CHECK_THAT(error_of({{"WORLD_SIZE", "2"}}), Catch::Contains("RANK is not set"));
}

TEST_CASE("a torchrun-style launch needs a token that names its job") {
  // RANK/WORLD_SIZE/MASTER_* are the same for another job on the same port: a token derived from
  // them would let the two join each other. Without a per-job value the user must hand one out.
  for (const Vars& vars : {kTorchrun, without(kTorchrun, "TORCHELASTIC_RUN_ID"),
                           Vars{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29400"}}}) {
    const std::string message = error_of(vars);
    CHECK_THAT(message, Catch::Contains("PTRAIN_JOB_TOKEN is not set") && Catch::Contains("every rank") &&
                            Catch::Contains("head -c16 /dev/urandom"));
  }
  // torchrun's rendezvous id names the job when it is not the default "none" (--standalone draws a
  // random one): every rank derives the same token from it, another run id another token.
  const Vars standalone = with(kTorchrun, {{"TORCHELASTIC_RUN_ID", "5f0c7ad6-2a41-4c51-9b0e-3c1f0f6f2f11"}});
  const WorkerEnv w = detect_some(standalone);
  CHECK(is_hex_token(w.token));
  CHECK_FALSE(w.token_from_env);
  CHECK(detect_some(with(standalone, {{"RANK", "0"}, {"LOCAL_RANK", "0"}})).token == w.token);
  CHECK(detect_some(with(standalone, {{"TORCHELASTIC_RUN_ID", "another"}})).token != w.token);
  CHECK(detect_some(with(standalone, {{"PTRAIN_JOB_TOKEN", "mine"}})).token == "mine");
}

TEST_CASE("rank variables must be strict integers in range") {
  CHECK_THAT(error_of(with(kTorchrun, {{"RANK", "2x"}})), Catch::Contains("RANK=\"2x\" is not an integer"));
  CHECK_THAT(error_of(with(kTorchrun, {{"RANK", " 2"}})), Catch::Contains("is not an integer"));
  CHECK_THAT(error_of(with(kTorchrun, {{"RANK", "+2"}})), Catch::Contains("is not an integer"));
  CHECK_THAT(error_of(with(kTorchrun, {{"RANK", "99999999999"}})), Catch::Contains("is not an integer"));
  CHECK_THAT(error_of(with(kTorchrun, {{"RANK", "8"}})),
             Catch::Contains("RANK=8 is outside [0, WORLD_SIZE=8)"));
  CHECK_THAT(error_of(with(kTorchrun, {{"RANK", "-1"}})), Catch::Contains("RANK=-1"));
  CHECK_THAT(error_of(with(kTorchrun, {{"WORLD_SIZE", "0"}, {"RANK", "0"}})),
             Catch::Contains("WORLD_SIZE=0 must be at least 1"));
  // The launcher's variable is named, not --world / --nproc as a world out of range from the command line is.
  CHECK_THAT(error_of(with(kSrun, {{"SLURM_STEP_NUM_TASKS", "2000000000"}})),
             Catch::Contains("SLURM_STEP_NUM_TASKS=2000000000 is more than the 1048576 ranks"));
  CHECK_THAT(error_of(with(kTorchrun, {{"LOCAL_RANK", "4"}})),
             Catch::Contains("LOCAL_RANK=4 is outside [0, LOCAL_WORLD_SIZE=4)"));
  CHECK_THAT(error_of(with(kTorchrun, {{"LOCAL_WORLD_SIZE", "9"}})), Catch::Contains("LOCAL_WORLD_SIZE=9"));
  CHECK_THAT(error_of(with(kOpenMpi, {{"OMPI_COMM_WORLD_SIZE", "two"}})),
             Catch::Contains("OMPI_COMM_WORLD_SIZE=\"two\""));
}

TEST_CASE("MASTER_PORT must be a TCP port") {
  for (const char* bad : {"0", "65536", "80a", "-1", "http"}) {
    INFO(bad);
    CHECK_THAT(error_of(with(kTorchrun, {{"MASTER_PORT", bad}})), Catch::Contains("is not a TCP port"));
  }
  CHECK(detect_some(with(kTorchrunWithToken, {{"MASTER_PORT", "65535"}})).store_port == 65535);
}

TEST_CASE("a numeric MASTER_ADDR must be an IPv4 address (a name is looked up when used)") {
  // 256.1.1.1 had the other ranks retry it for the whole comm.timeout_s, then exit 1.
  for (const char* bad : {"256.1.1.1", "10.0.0", "1.2.3.4.5", "..."}) {
    INFO(bad);
    CHECK_THAT(error_of(with(kTorchrunWithToken, {{"MASTER_ADDR", bad}})), Catch::Contains("is not an IPv4 address"));
  }
  for (const char* good : {"10.0.0.1", "gpu07", "node-0.cluster", "123host"})
    CHECK(detect_some(with(kTorchrunWithToken, {{"MASTER_ADDR", good}})).store_host == good);
}

TEST_CASE("Slurm host lists expand ranges, keep zero padding and multiply bracket groups") {
  using Hosts = std::vector<std::string>;
  CHECK(expand_slurm_hostlist("node[01-04,07],gpu5,a[1-2]b") ==
        Hosts{"node01", "node02", "node03", "node04", "node07", "gpu5", "a1b", "a2b"});
  CHECK(expand_slurm_hostlist("n[8-10]") == Hosts{"n8", "n9", "n10"});
  CHECK(expand_slurm_hostlist("n[08-10]") == Hosts{"n08", "n09", "n10"});
  CHECK(expand_slurm_hostlist("r[1-2]n[1-2]") == Hosts{"r1n1", "r1n2", "r2n1", "r2n2"});
  CHECK(expand_slurm_hostlist("single") == Hosts{"single"});
  CHECK(expand_slurm_hostlist("a-b.example.com,c") == Hosts{"a-b.example.com", "c"});
  CHECK(expand_slurm_hostlist("").empty());
  for (const char* bad : {"n[1-", "n[3-1]", "n[a-b]", "n]1[", "a,,b", "n[]", "n[1-2-3]"}) {
    INFO(bad);
    CHECK_THROWS_AS(expand_slurm_hostlist(bad), LaunchConfigError);
  }
}

TEST_CASE("Slurm per-node task counts expand their repeat counts") {
  CHECK(expand_slurm_tasks_per_node("4(x2),3") == std::vector<int>{4, 4, 3});
  CHECK(expand_slurm_tasks_per_node("2") == std::vector<int>{2});
  CHECK(expand_slurm_tasks_per_node("1,2(x1)") == std::vector<int>{1, 2});
  for (const char* bad : {"4(x)", "x", "4(y2)", "4(x2", "", "4(x0)"}) {
    INFO(bad);
    CHECK_THROWS_AS(expand_slurm_tasks_per_node(bad), LaunchConfigError);
  }
}

TEST_CASE("job tokens are 32 random hex characters") {
  std::set<std::string> seen;
  for (int i = 0; i < 8; ++i) {
    const std::string token = new_job_token();
    CHECK(is_hex_token(token));
    seen.insert(token);
  }
  CHECK(seen.size() == 8);
}
