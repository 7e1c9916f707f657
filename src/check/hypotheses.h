// Internal: the suspected mistakes `rotary check` tests, each re-derived from the config in double.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "check/canonical.h"
#include "rotary/freqs.h"

namespace rotary::parity {

struct FreqVariant {
  std::string code, message;  ///< empty code: the config itself
  std::vector<double> inv_freq;
  std::optional<DType> low_precision_angles;
  bool fitted = false;  ///< a parameter fitted to the data (the base): declared only if no other mistake explains
};
struct FactorVariant {
  std::string code, message;
  double af = 1.0;
};
struct Hypotheses {
  std::vector<FreqVariant> freqs;     ///< [0] is the config's
  std::vector<FactorVariant> factors; ///< [0] is the config's
  std::vector<ParityDiagnosis> structural;  ///< facts the decoding itself established (pairing)
};

/// `found`/`sigma`: per-band estimates from the data and their uncertainty (NaN: unresolved), used to fit the
/// base of the base-mismatch hypothesis. `af_testable`: the data carries an attention factor.
Hypotheses make_hypotheses(const Spec& spec, std::optional<int64_t> seq_len, const Frequencies& truth,
                           const Canonical& data, bool af_testable, const std::vector<double>& found,
                           const std::vector<double>& sigma);

/// low_precision_table for data whose own dtype (f16/bf16 inv_freq or angles) loses more than 1e-2 rad within
/// positions [0, range); nullopt otherwise.
std::optional<std::string> dtype_precision_diagnosis(const Canonical& data, const Frequencies& truth, int64_t range);

}  // namespace rotary::parity
