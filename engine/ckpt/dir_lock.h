// One job per checkpoint directory: checkpoint.dir is claimed before anything reads or writes it and
// held for the job's lifetime, and checked to be a writable directory then, not at the first save.
//
// Who holds it: world rank 0's process, which exists under every launcher (ptrain's own, mpirun,
// srun) and is the one that creates and commits the temporary step directories. The other ranks,
// wherever they run, never touch the lock: rank 0 tells them whether the claim succeeded. So the
// only processes that contend for a lock are the rank 0s of different jobs, possibly on different
// machines sharing the filesystem.
//
// How: <dir>/job.lock, held with flock(LOCK_EX | LOCK_NB) on an open descriptor. The kernel drops
// the lock when its process ends however it ends (kill -9, OOM), so a crashed job never leaves the
// directory locked and no timeout has to guess whether a holder is alive. Linux NFS clients map
// flock onto NFS byte-range locks, which the server releases when a dead client's lease runs out,
// so this works between machines; Lustre does when mounted with -o flock. The file holds the
// holder's host, pid and start time: a refused job is told who holds the directory, and a job that
// gets the lock but finds the file filled in knows the previous holder died without releasing it
// (a stale lock) and says so. A clean release empties the file but keeps it: removing it would race
// with a job that has just opened it.
//
// Where the filesystem has no flock (ENOLCK, EOPNOTSUPP, ENOSYS: NFS mounted nolock, Lustre without
// -o flock) the file's contents are the lock, with a warning: free when empty; held while it names
// a live process of this host; stale (taken over) when it names a dead one; and refused when it
// names another host, whose processes cannot be checked from here: the message says to remove the
// file if that job is gone. Two jobs starting in the same instant can both win there; flock exists
// to close that gap.
#pragma once

#include <string>
#include <vector>

namespace ptrain::ckpt {

class CheckpointDirLock {
 public:
  // Claims `dir` (checkpoint.dir) for this process: creates it if needed, takes the lock, checks
  // that a file can be created in it, and removes what crashed saves left there (safe now that no
  // other job writes to it). A CheckpointError (bad input) says why the directory cannot be used:
  // not a directory, cannot be created, not writable, or in use by another job (host, pid, since).
  explicit CheckpointDirLock(const std::string& dir);
  ~CheckpointDirLock();  // releases the lock
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;

  static constexpr const char* kFileName = "job.lock";  // in the claimed directory

  const std::string& lock_path() const { return lock_path_; }
  // What the job should print: a stale lock taken over, a filesystem without flock.
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  std::string lock_path_;
  int fd_ = -1;
  std::vector<std::string> warnings_;
};

}  // namespace ptrain::ckpt
