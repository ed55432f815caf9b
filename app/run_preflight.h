// What `ptrain run` checks in the files a job names before any rank starts (and so before anything
// is allocated): that data.train and data.valid name data that opens (the files there, their
// headers: what the trainer opens), that checkpoint.load_hf holds an export of the job's model
// (ckpt::check_hf, the checker `convert --from-hf` and the trainer use), and that the logging paths
// hold no other run's records (train::refuse_records, which the trainer applies again once it
// holds checkpoint.dir).
#pragma once

#include <vector>

#include "engine/config/diagnostics.h"
#include "engine/config/loader.h"

namespace ptrain::app {

// An error at data.train or data.valid where its data does not open (a file missing, relative paths
// with the directory they were looked for in, or malformed); one at checkpoint.load_hf where it
// does not fit the model (naming the key and both values);
// with `records`, one at the logging key whose path holds another run's records, with the fix.
// `records` where this process starts every rank (alone, or as the local launcher): under srun,
// mpirun or torchrun only rank 0 writes the records, and ranks that each refused on their own (from
// their own working directories) would leave the others waiting; rank 0 checks them there once it
// holds checkpoint.dir, and every rank fails alike.
std::vector<config::Diagnostic> run_input_errors(const config::LoadResult& job, bool records);

}  // namespace ptrain::app
