#!/usr/bin/env bash
# Example Slurm batch script: ptrain on 4 nodes x 8 GPUs (32 ranks), one srun task per GPU.
#
#   sbatch scripts/sbatch_example.sh configs/llama3-8b.yaml [--set key=value ...]
#
# Under srun each task is one ptrain worker: ptrain reads its rank from SLURM_PROCID, the world size
# from SLURM_STEP_NUM_TASKS and its local rank from SLURM_LOCALID, so no --nproc here (that is for
# the local launcher, `ptrain run job.yaml --nproc N` alone on one machine). The batch script itself
# runs once, on the first node, and is not a worker: it has SLURM_PROCID=0 too, but no
# SLURM_STEP_NUM_TASKS/SLURM_STEP_ID, which only srun steps export.
#
# Adapt the #SBATCH lines to your cluster (partition, account, CPUs and time per node).
#SBATCH --job-name=ptrain
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8          # one task (rank) per GPU
#SBATCH --gpus-per-node=8            # all 8 GPUs of a node visible to its 8 tasks; rank = GPU by local rank
#SBATCH --cpus-per-task=12           # e.g. 96 cores / 8 ranks: data loading and host work
#SBATCH --exclusive
#SBATCH --time=24:00:00
#SBATCH --output=%x-%j.out           # job name and id; a requeued job appends to the same file
#SBATCH --open-mode=append
# Stopping cleanly: on SIGTERM every rank checkpoints at the next step boundary and exits 0.
# --signal=TERM@120 has Slurm send SIGTERM to the tasks of every srun step (not to this script:
# that would be B:TERM) about 120 s before the time limit (up to 60 s earlier; Slurm checks once a
# minute), so the last checkpoint is written before the limit. Pick a lead time longer than one
# step plus a checkpoint save. Without it, the time limit sends SIGTERM only KillWait (often 30 s)
# before SIGKILL.
#SBATCH --signal=TERM@120
# Preemption and node failures: with --requeue Slurm puts the job back in the queue (same job id,
# SLURM_RESTART_COUNT incremented) instead of ending it; with checkpoint.resume: auto in the job
# (the shipped configs have it) the new run continues from the last checkpoint. Preemption sends
# SIGTERM to all steps and SIGKILL after the partition's GraceTime, which must cover a checkpoint.
#SBATCH --requeue

set -euo pipefail

JOB=${1:?usage: sbatch $0 job.yaml [--set key=value ...]}
shift

# Run from the directory sbatch was called in (Slurm's default), with ptrain on PATH or here.
PTRAIN=${PTRAIN:-$(command -v ptrain || echo ./build/ptrain)}

# One secret for the whole job, drawn once here so every task gets the same one (srun passes this
# script's environment to its tasks): ranks present it to the rendezvous store, which turns away
# anything else that connects to it. Without it ptrain derives a token from the job id, which keeps
# out mistakes (a stale job's ranks) but not other users of the cluster.
PTRAIN_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export PTRAIN_JOB_TOKEN

# The rendezvous store runs on rank 0, which srun places on the first node of the allocation.
# Optional: without MASTER_ADDR ptrain uses the first host of SLURM_STEP_NODELIST/SLURM_JOB_NODELIST.
# Set it when the hosts should talk over another interface (e.g. "$(...)-ib0").
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
export MASTER_ADDR
# Optional: without MASTER_PORT ptrain uses the first of SLURM_STEP_RESV_PORTS (clusters with
# MpiParams=ports=...), else a port in [20000, 50000) derived from the job and step ids. A fixed
# choice per job avoids clashes between jobs sharing a node:
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 30000))

# Threads per rank for CPU-side work.
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}

# GPUs per node as the job sees them ("8", or "h100:8" when a type was requested).
gpus_per_node=${SLURM_GPUS_PER_NODE:-8}
gpus_per_node=${gpus_per_node##*:}

echo "ptrain: job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on $SLURM_JOB_NUM_NODES nodes" \
     "($SLURM_JOB_NODELIST), $SLURM_NTASKS ranks, store $MASTER_ADDR:$MASTER_PORT"

# One step, one task per rank. The --set overrides make the job's cluster shape match the
# allocation (ranks = nodes * gpus_per_node must equal the task count).
# --kill-on-bad-exit=1: when one rank fails (non-zero exit or killed), srun kills the others at
#   once instead of leaving them blocked in a collective until the time limit.
# srun forwards SIGINT/SIGTERM it receives (e.g. `scancel --signal=TERM $SLURM_JOB_ID` reaches the
# tasks directly) and exits with the worst task exit code, which becomes the job's.
# --max-restarts: a rank that fails at runtime (a rank died or hung, exit 1) while restarts are left
#   exits 75 (EX_TEMPFAIL) instead; ptrain counts the attempts from SLURM_RESTART_COUNT.
MAX_RESTARTS=${PTRAIN_MAX_RESTARTS:-3}
set +e
srun --kill-on-bad-exit=1 \
  "$PTRAIN" run "$JOB" --max-restarts "$MAX_RESTARTS" \
  --set cluster.nodes="$SLURM_JOB_NUM_NODES" \
  --set cluster.gpus_per_node="$gpus_per_node" \
  "$@"
rc=$?
set -e
# Requeue: the job goes back into the queue with the same id (SLURM_RESTART_COUNT + 1) and resumes
# from the last checkpoint. 75 is ptrain's "failed at runtime, restart me"; a rank killed outright
# (a node lost, the OOM killer: exit above 128) could not say so, and is restarted too while
# restarts are left. 0 (done, or stopped cleanly) and 2 (bad input) are never retried.
restarts=${SLURM_RESTART_COUNT:-0}
if [ "$rc" -eq 75 ] || { [ "$rc" -gt 128 ] && [ "$restarts" -lt "$MAX_RESTARTS" ]; }; then
  echo "ptrain: exit $rc, requeueing job $SLURM_JOB_ID (restart $((restarts + 1)) of $MAX_RESTARTS)"
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$rc"
