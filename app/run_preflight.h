// What `ptrain run` checks in the files a job names before any rank starts (and so before anything
// is allocated): that checkpoint.load_hf holds an export of the job's model (ckpt::check_hf, the
// checker `convert --from-hf` and the trainer use), and that the logging paths hold no other run's
// records (train::refuse_records, which the trainer applies again once it holds checkpoint.dir).
#pragma once

#include <vector>

#include "engine/config/diagnostics.h"
#include "engine/config/loader.h"

namespace ptrain::app {

// An error at checkpoint.load_hf where it does not fit the model (naming the key and both values);
// one at the logging key whose path holds another run's records, with the fix.
std::vector<config::Diagnostic> run_input_errors(const config::LoadResult& job);

}  // namespace ptrain::app
