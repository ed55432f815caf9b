// A thread that runs a batch of tasks 0..count-1 in order while the caller goes on, and lets the
// caller wait for a prefix of them: ZeRO-Offload's host update (zero/data_parallel.h) runs
// AdamW unit by unit on it while the next forward waits only for the unit it reaches.
// One batch at a time; a task's exception ends the batch and is rethrown to whoever waits.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace ptrain::runtime {

class OrderedWorker {
 public:
  OrderedWorker() = default;
  OrderedWorker(const OrderedWorker&) = delete;
  OrderedWorker& operator=(const OrderedWorker&) = delete;
  ~OrderedWorker();  // waits for the batch (its exception, if any, is dropped)

  // Waits for the previous batch (rethrowing its failure), then starts task(0), ..., task(count-1)
  // on the worker thread.
  void start(int count, std::function<void(int)> task);
  // Returns once tasks 0..index of the current batch are done (all of them for an index past its
  // end or below 0; at once with no batch); rethrows the batch's failure.
  void wait(int index);
  void wait_all() { wait(-1); }
  // Whether wait(index) would return at once (a failed batch counts as done: wait() reports it).
  bool done(int index);

 private:
  void join();                      // ends the thread of a finished batch
  int last_of(int index) const;     // the last task wait(index) waits for (mutex_ held)

  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable advanced_;
  int count_ = 0, done_ = 0;  // the batch's tasks, those finished
  std::exception_ptr failure_;
};

}  // namespace ptrain::runtime
