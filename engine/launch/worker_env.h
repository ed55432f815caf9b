// Who this process is in a job: detected from the variables that a launcher exports (our local
// launcher, Open MPI's mpirun, a PMI launcher such as MPICH/Intel MPI's mpiexec, Slurm's srun, or
// torchrun-style RANK/WORLD_SIZE). No variables at all means this process is the launcher itself.
// A variable set to the empty string counts as unset.
//
// Detection order, first match wins (an outer launcher's variables can leak into an inner one's
// workers, so the most specific launcher is tried first):
//   1. "ptrain"  PTRAIN_LAUNCHED=1 with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
//                MASTER_PORT, PTRAIN_JOB_TOKEN (and PTRAIN_STORE_FD on rank 0), all required.
//   2. "mpirun"  OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK/_LOCAL_SIZE (Open MPI). Checked before Slurm
//                because mpirun inside an allocation starts its daemons with srun, so its ranks
//                also carry the daemons' SLURM_PROCID/SLURM_STEP_NUM_TASKS.
//   3. "mpirun"  PMI_RANK/PMI_SIZE (MPICH hydra, Intel MPI). Local rank from MPI_LOCALRANKID or
//                PMI_LOCAL_RANK, local size from MPI_LOCALNRANKS or PMI_LOCAL_SIZE; without them
//                every rank is assumed alone on its machine (local rank 0 of 1). When the Slurm step
//                variables describe the same rank and size, it is `srun --mpi=pmi2` and rule 4 wins.
//   4. "srun"    SLURM_PROCID, SLURM_LOCALID, SLURM_STEP_NUM_TASKS and a normal SLURM_STEP_ID.
//                Only srun exports SLURM_STEP_NUM_TASKS; a batch script (sbatch without srun) has
//                SLURM_PROCID=0, SLURM_LOCALID=0 and SLURM_NTASKS too, and must stay a launcher.
//                Step ids of 0xfffffff0 and above are Slurm's special steps (batch, extern,
//                interactive) and are not worker steps either. Local size: this node's entry of
//                SLURM_STEP_TASKS_PER_NODE (index SLURM_NODEID, e.g. "4(x2),3").
//   5. "env"     RANK and WORLD_SIZE; LOCAL_RANK/LOCAL_WORLD_SIZE optional (default: all ranks on
//                this machine, LOCAL_RANK=RANK, LOCAL_WORLD_SIZE=WORLD_SIZE).
//
// Store address: MASTER_ADDR when set; srun: first host of SLURM_STEP_NODELIST (or
// SLURM_JOB_NODELIST); mpirun/env with every rank on this machine: 127.0.0.1; otherwise a
// LaunchConfigError asking for MASTER_ADDR.
// Store port: MASTER_PORT when set; srun: the first of SLURM_STEP_RESV_PORTS, else derived from
// SLURM_JOB_ID and SLURM_STEP_ID; mpirun: derived from PMIX_NAMESPACE or OMPI_MCA_ess_base_jobid
// (or, for an MPI launcher inside a Slurm allocation, the srun step that started it); otherwise a
// LaunchConfigError asking for MASTER_PORT. Derived ports lie in [20000, 50000).
// Job token: PTRAIN_JOB_TOKEN when set (token_from_env = true); otherwise derived from a value the
// launcher exports that names this one job, with token_from_env = false (the worker warns that the
// token keeps out mistakes, not attackers): Open MPI from its per-job random
// OMPI_MCA_orte_precondition_transports, srun/mpirun from the job ids, torchrun from
// TORCHELASTIC_RUN_ID unless it is "none" (its default; --standalone draws a random one). With
// none of these (a hand-made RANK/WORLD_SIZE launch, MPICH's mpiexec outside Slurm) a
// LaunchConfigError asks for PTRAIN_JOB_TOKEN: MASTER_ADDR:MASTER_PORT is the same for another job
// on that port, and a token derived from it would let the two jobs join each other.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ptrain::dist {

struct WorkerEnv {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_world = 1;
  std::string store_host;
  int store_port = 0;
  std::string token;
  // True when the token came from PTRAIN_JOB_TOKEN (a secret the launcher chose); false when it
  // was derived from what the launcher exports, which other users may be able to learn.
  bool token_from_env = false;
  std::string launcher;  // "ptrain", "mpirun", "srun" or "env"
  int store_fd = -1;     // inherited listening socket for rank 0 when spawned by the local launcher
  std::string host;      // this machine's hostname
};

using GetenvFn = std::function<const char*(const char*)>;

// `text` (the value of variable `name`) as a TCP port, a plain decimal 1..65535; else a
// LaunchConfigError naming both ("MASTER_PORT='80x' is not a TCP port (1..65535)").
int parse_port(const std::string& name, const std::string& text);

// The worker identity from the environment, or nullopt when no launcher variables are present
// (this process is the local launcher). Throws LaunchConfigError naming the variable and its value
// when the variables are present but inconsistent or malformed.
std::optional<WorkerEnv> detect_worker_env(const GetenvFn& getenv_fn);
std::optional<WorkerEnv> detect_worker_env();  // reads the process environment (::getenv)

// Expands a Slurm hostlist: "node[01-04,07],gpu5,a[1-2]b" -> node01 node02 node03 node04 node07
// gpu5 a1b a2b. Zero padding of a range's lower bound is kept; several bracket groups in one name
// multiply out. Throws LaunchConfigError on malformed lists.
std::vector<std::string> expand_slurm_hostlist(const std::string& hostlist);

// Expands Slurm's compressed per-node task counts: "4(x2),3" -> {4, 4, 3}.
std::vector<int> expand_slurm_tasks_per_node(const std::string& counts);

// 32 lowercase hex characters from the kernel's random source (getrandom). Throws DistError if no
// randomness is available.
std::string new_job_token();

// 32 lowercase hex characters that depend only on `text` (two salted 64-bit FNV-1a hashes), the
// same on every machine: for ranks to compare what they started from without sending it, and to
// derive tokens from job ids. Keeps out mistakes, not attackers.
std::string text_digest(const std::string& text);

}  // namespace ptrain::dist
