// The report's tables: the spec and band table on the console, bands.csv, and the bands section of report.json.
#pragma once

#include <filesystem>
#include <string>

#include "format.h"
#include "model.h"

namespace rotary::cli::report {

/// Name, description, then the spec with the scaling parameters its rope_type reads.
void print_spec(const ModelView& m, const std::string& description);
/// The band table: prints it (one row per pair, the type's explanation, a summary of contiguous classes),
/// writes bands.csv into `dir` and adds report.json's "bands".
void report_bands(const ModelView& m, const std::filesystem::path& dir, Json& rep);

}  // namespace rotary::cli::report
