#pragma once
// The op parameters of one block for a call of length T, shared by the model's
// forward/backward and the cached decoder's prefill, so both run the same SGU and
// attention.
#include "gmlp/config.h"
#include "gmlp/model.h"
#include "ops/ops.h"

namespace gmlp {

// Toeplitz weights are expanded first into Wd, dense [heads, T, T].
ops::SguParams sgu_params(const ModelConfig& c, const BlockParams& p, int T, float* Wd, const int32_t* lengths);
ops::AttnParams attn_params(const ModelConfig& c, const BlockParams& p, const int32_t* lengths);

}  // namespace gmlp
