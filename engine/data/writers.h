// Writers for the two file formats, for tests and tools that need small datasets on disk
// (scripts/prepare_data.mjs is the production writer of llm.c shards).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/data/megatron_dataset.h"

namespace ptrain::data {

// An llm.c shard: 1024-byte header (20240520, 1, tokens.size()) + uint16 tokens.
// Throws DataError if the file cannot be written.
void write_llmc_shard(const std::string& path, std::span<const std::uint16_t> tokens);

// A Megatron indexed dataset with one sequence per document: prefix.idx and prefix.bin.
// Throws std::invalid_argument for a float dtype or a token that dtype cannot hold, DataError
// if a file cannot be written.
void write_megatron_dataset(const std::string& prefix,
                            const std::vector<std::vector<std::int64_t>>& documents, MegatronDtype dtype);

}  // namespace ptrain::data
