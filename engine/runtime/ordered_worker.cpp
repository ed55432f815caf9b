#include "engine/runtime/ordered_worker.h"

#include <utility>

namespace ptrain::runtime {

OrderedWorker::~OrderedWorker() { join(); }

void OrderedWorker::join() {
  if (thread_.joinable()) thread_.join();
}

void OrderedWorker::start(int count, std::function<void(int)> task) {
  wait_all();
  join();
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    count_ = count;
    done_ = 0;
    failure_ = nullptr;
  }
  thread_ = std::thread([this, count, task = std::move(task)] {
    for (int i = 0; i < count; ++i) {
      std::exception_ptr failure;
      try {
        task(i);
      } catch (...) {
        failure = std::current_exception();
      }
      const std::lock_guard<std::mutex> lock(mutex_);
      done_ = failure ? count : i + 1;
      failure_ = failure;
      advanced_.notify_all();
      if (failure) return;
    }
  });
}

int OrderedWorker::last_of(int index) const { return index < 0 || index >= count_ ? count_ - 1 : index; }

bool OrderedWorker::done(int index) {
  const std::lock_guard<std::mutex> lock(mutex_);
  return done_ > last_of(index);
}

void OrderedWorker::wait(int index) {
  std::unique_lock<std::mutex> lock(mutex_);
  const int last = last_of(index);
  advanced_.wait(lock, [&] { return done_ > last; });
  if (failure_) std::rethrow_exception(failure_);
}

}  // namespace ptrain::runtime
