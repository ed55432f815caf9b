#!/usr/bin/env bash
# A throwaway one-node Slurm cluster on this machine, for the launcher tests.
#
#   bash tests/launch/slurm_cluster.sh start    # munged + slurmctld + slurmd, waits for the node to be idle
#   bash tests/launch/slurm_cluster.sh status   # sinfo / squeue
#   bash tests/launch/slurm_cluster.sh stop     # stops what start started and removes the state dir
#
# Everything lives in a private state dir, ${PTRAIN_SLURM_DIR:-/tmp/ptrain-slurm}: slurm.conf, a
# private munge key and socket, spool/state dirs, logs and pid files. Nothing under /etc is used or
# changed, and a system munged/slurmd (if any) is left alone: our munged has its own socket
# (AuthInfo=socket=...) and key, our daemons their own ports.
#
# Clients must use the same config; `start` prints the line to use:
#   export SLURM_CONF=/tmp/ptrain-slurm/slurm.conf
#   srun -n 4 hostname
#
# Meant for root on a Debian 12 machine or container (CI), without systemd or cgroups:
# SlurmUser=root, proctrack/linuxproc, task/none. The node claims ${PTRAIN_SLURM_CPUS:-8} CPUs
# whatever the hardware has (SlurmdParameters=config_overrides) and the partition oversubscribes, so
# `srun -n 4` works on a 2-core machine.
# Packages (installed by scripts/setup.sh): slurmctld slurmd slurm-client munge.
#
# Environment: PTRAIN_SLURM_DIR (state dir), PTRAIN_SLURM_CTLD_PORT (16817), PTRAIN_SLURMD_PORT
# (16818), PTRAIN_SLURM_CPUS (8), PTRAIN_SLURM_TIMEOUT (seconds to wait for the node, 30),
# PTRAIN_SLURM_RESV_PORTS (unset: no MpiParams; e.g. 30000-30999: MpiParams=ports=..., and then
# every srun step exports SLURM_STEP_RESV_PORTS, tasks-per-node + 1 ports, e.g. 30001-30003).
set -euo pipefail

dir=${PTRAIN_SLURM_DIR:-/tmp/ptrain-slurm}
ctld_port=${PTRAIN_SLURM_CTLD_PORT:-16817}
slurmd_port=${PTRAIN_SLURMD_PORT:-16818}
cpus=${PTRAIN_SLURM_CPUS:-8}
timeout=${PTRAIN_SLURM_TIMEOUT:-30}
resv_ports=${PTRAIN_SLURM_RESV_PORTS:-}
host=$(hostname -s)
# The compute node is called "localhost" so that the node list (which ptrain's srun workers take
# the store host from) resolves on any machine, even one whose own host name does not.
node=localhost
conf=$dir/slurm.conf
munge_sock=$dir/munge/munge.socket

export PATH=$PATH:/usr/sbin:/sbin

die() { echo "slurm_cluster: $*" >&2; exit 1; }

pid_alive() {  # pid_alive FILE: the pid in FILE is a live process
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null
}

show_logs() {
  local f
  for f in "$dir"/log/*.log; do
    [ -f "$f" ] || continue
    echo "----- $f (last 40 lines) -----" >&2
    tail -n 40 "$f" >&2 || true
  done
}

# The node's state ("idle", "down*", ...), or nothing; bounded, as clients retry for a long while
# when the controller is not answering.
node_state() {
  SLURM_CONF=$conf timeout 5 sinfo -h -n "$node" -o %t 2>/dev/null | head -n1 || true
}

write_conf() {
  local user
  user=$(id -un)
  cat >"$conf" <<EOF
# Written by tests/launch/slurm_cluster.sh: a throwaway one-node cluster. Do not edit.
ClusterName=ptrain-test
SlurmctldHost=$host(127.0.0.1)
SlurmUser=$user
SlurmdUser=$user
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$munge_sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$dir/plugstack.conf
MailProg=/bin/true
# No cgroups: containers rarely allow them.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MessageTimeout=5
MpiDefault=none
${resv_ports:+MpiParams=ports=$resv_ports}
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
# Trust the CPU count below rather than the hardware's.
SlurmdParameters=config_overrides
# Quick to schedule, quick to clean up.
InactiveLimit=0
KillWait=5
MinJobAge=60
SlurmdTimeout=60
SlurmctldTimeout=60
NodeName=$node NodeAddr=127.0.0.1 NodeHostname=$host CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
EOF
}

start() {
  local b
  for b in munged slurmctld slurmd sinfo srun; do
    command -v "$b" >/dev/null 2>&1 || {
      echo "slurm_cluster: '$b' not found; install Slurm and munge with scripts/setup.sh" \
           "(Debian packages slurmctld slurmd slurm-client munge)" >&2
      exit 2
    }
  done

  if pid_alive "$dir/run/munged.pid" && pid_alive "$dir/run/slurmctld.pid" \
     && pid_alive "$dir/run/slurmd.pid" && [[ $(node_state) == idle* || $(node_state) == mix* ]]; then
    echo "slurm_cluster: already running in $dir"
    echo "export SLURM_CONF=$conf"
    return 0
  fi
  # Left-overs of an earlier run (crashed test, half-started cluster): clear them first.
  [ -e "$dir" ] && stop >/dev/null

  # munged refuses directories that others may write to: keep everything ours, 0711/0755.
  umask 022
  mkdir -p "$dir"
  chmod 0711 "$dir"
  : >"$dir/.ptrain-slurm"   # marks the dir as ours: stop removes only such dirs
  mkdir -p "$dir"/{munge,state,spool,run,log}
  chmod 0755 "$dir/munge"
  : >"$dir/plugstack.conf"   # no SPANK plugins (ignore /etc/slurm/plugstack.conf.d)

  # A private key: the system's /etc/munge/munge.key (if any) belongs to the munge user, and our
  # munged runs as us; all our daemons and clients talk to our munged only, so any key will do.
  if command -v mungekey >/dev/null 2>&1; then
    mungekey --create --keyfile="$dir/munge/munge.key" >/dev/null
  else
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  fi
  chmod 0400 "$dir/munge/munge.key"

  write_conf

  # --force: run as root and accept what munged only warns about. It daemonizes once its socket
  # is ready.
  munged --force --socket="$munge_sock" --key-file="$dir/munge/munge.key" \
         --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" \
         --seed-file="$dir/munge/munged.seed" \
    || { show_logs; die "munged failed to start"; }

  export SLURM_CONF=$conf
  # Both daemonize after reading the config and write their pid files; -c: no saved state.
  slurmctld -c || { show_logs; die "slurmctld failed to start"; }
  slurmd -N "$node" || { show_logs; die "slurmd failed to start"; }

  local deadline=$((SECONDS + timeout)) st="" d why=""
  while :; do
    st=$(node_state)
    [[ $st == idle* ]] && break
    for d in munged slurmctld slurmd; do
      # A daemon that wrote its pid file and died will not come back.
      [ -s "$dir/run/$d.pid" ] && ! pid_alive "$dir/run/$d.pid" && why="$d died"
    done
    ((SECONDS >= deadline)) && why="node $node not idle after ${timeout}s (state '${st:-none}')"
    if [ -n "$why" ]; then
      echo "slurm_cluster: $why" >&2
      show_logs
      echo "slurm_cluster: (ports $ctld_port/$slurmd_port taken? set PTRAIN_SLURM_CTLD_PORT and" \
           "PTRAIN_SLURMD_PORT)" >&2
      stop >/dev/null 2>&1 || true
      exit 1
    fi
    sleep 0.2
  done
  echo "slurm_cluster: node $node idle ($cpus CPUs, partition debug) in $dir"
  echo "export SLURM_CONF=$conf"
}

term_and_wait() {  # term_and_wait PIDFILE...: TERM those processes, wait up to 10 s, then KILL them
  local f pid pids=() i left
  for f in "$@"; do
    pid_alive "$f" || continue
    pid=$(cat "$f")
    kill -TERM "$pid" 2>/dev/null || true
    pids+=("$pid")
  done
  for ((i = 0; i < 100; i++)); do
    left=()
    for pid in ${pids[@]+"${pids[@]}"}; do
      kill -0 "$pid" 2>/dev/null && left+=("$pid")
    done
    ((${#left[@]})) || return 0
    sleep 0.1
  done
  echo "slurm_cluster: pids ${left[*]} ignored SIGTERM; killing them" >&2
  kill -KILL "${left[@]}" 2>/dev/null || true
}

# The slurmstepd processes of our cluster (they inherit slurmd's SLURM_CONF) and all their
# descendants (the tasks: proctrack/linuxproc does not kill them when slurmstepd dies), and the
# srun/salloc clients still waiting on our cluster (only those: the caller's shell may have
# SLURM_CONF exported too).
leftover_steps() {
  local p pid stat comm rest roots=() more
  declare -A parent=() tree=()
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    read -r stat <"$p/stat" 2>/dev/null || continue   # pid (comm) state ppid ...
    comm=${stat#*\(}; comm=${comm%\)*}
    rest=${stat##*\) }; rest=${rest#* }
    parent[$pid]=${rest%% *}
    case $comm in slurmstepd | srun | salloc) ;; *) continue ;; esac
    tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qxF "SLURM_CONF=$conf" && roots+=("$pid")
  done
  ((${#roots[@]})) || return 0
  for pid in "${roots[@]}"; do tree[$pid]=1; done
  more=1
  while ((more)); do
    more=0
    for pid in "${!parent[@]}"; do
      [ -z "${tree[$pid]:-}" ] && [ -n "${tree[${parent[$pid]}]:-}" ] && { tree[$pid]=1; more=1; }
    done
  done
  echo "${!tree[@]}"
}

stop() {
  if [ -d "$dir" ]; then
    if [ ! -e "$dir/.ptrain-slurm" ] && [ -n "$(ls -A "$dir")" ]; then
      die "$dir was not made by this script (no .ptrain-slurm); not touching it"
    fi
    # Cancel whatever is still queued or running, and give slurmd a few seconds to kill the steps.
    if [ -s "$conf" ] && pid_alive "$dir/run/slurmctld.pid"; then
      export SLURM_CONF=$conf
      scancel --quiet --full --signal=KILL --partition=debug 2>/dev/null || true
      scancel --quiet --partition=debug 2>/dev/null || true
      local i
      for ((i = 0; i < 50; i++)); do
        [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
        sleep 0.1
      done
    fi
    # All three at once: each takes 1-2 s to exit, and none needs the others to shut down.
    term_and_wait "$dir/run/slurmd.pid" "$dir/run/slurmctld.pid" "$dir/run/munged.pid"
    # Steps that outlived slurmd, with their tasks.
    local pids
    pids=$(leftover_steps)
    if [ -n "$pids" ]; then
      echo "slurm_cluster: killing leftover slurmstepd and tasks: $pids" >&2
      # shellcheck disable=SC2086
      kill -KILL $pids 2>/dev/null || true
    fi
    rm -rf "$dir"
  fi
  echo "slurm_cluster: stopped"
}

status() {
  [ -s "$conf" ] || { echo "slurm_cluster: not running (no $conf)"; return 1; }
  SLURM_CONF=$conf sinfo
  SLURM_CONF=$conf squeue
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
