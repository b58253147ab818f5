#include "server/lora_adapters.h"

#include <utility>

namespace strata::server {

AdapterLoader::AdapterLoader() {
  thread_ = std::thread([this] { Loop(); });
}

AdapterLoader::~AdapterLoader() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    tasks_.clear();
  }
  cv_.NotifyAll();
  thread_.join();
}

void AdapterLoader::Post(std::function<void()> task) {
  {
    MutexLock lock(&mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.NotifyOne();
}

int AdapterLoader::pending() const {
  MutexLock lock(&mu_);
  return static_cast<int>(tasks_.size()) + (busy_ ? 1 : 0);
}

void AdapterLoader::Loop() {
  for (;;) {
    std::function<void()> task;
    {
      MutexLock lock(&mu_);
      busy_ = false;
      while (!(stop_ || !tasks_.empty())) cv_.Wait(&mu_);
      if (stop_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
      busy_ = true;
    }
    task();
  }
}

}  // namespace strata::server
