// Errors of the distributed runtime. DistError: the environment or a peer is wrong (bad launcher
// variables, a store that cannot be reached, a collective that timed out); the app reports it and
// exits 1. LaunchConfigError: the user's launch setup is invalid (inconsistent rank variables, a
// MASTER_PORT that is not a port); the app exits 2.
#pragma once

#include <stdexcept>
#include <string>

namespace ptrain::dist {

class DistError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class LaunchConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace ptrain::dist
