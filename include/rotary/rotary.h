// Umbrella header: everything in the rotary C++ API.
#pragma once

#include "rotary/api.h"
#include "rotary/version.h"
#include "rotary/types.h"
#include "rotary/spec.h"
#include "rotary/freqs.h"
#include "rotary/config.h"
#include "rotary/table.h"
#include "rotary/apply.h"
#include "rotary/onnx.h"
#include "rotary/multimodal.h"
#include "rotary/ggml.h"
#include "rotary/context_parallel.h"
#include "rotary/convert_weights.h"
#include "rotary/safetensors.h"
#include "rotary/parity.h"
#include "rotary/prologue.h"
