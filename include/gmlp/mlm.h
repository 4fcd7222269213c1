#pragma once
// BERT-style masking for the masked LM (docs/variants.md).
#include <cstdint>

#include "gmlp/rng.h"
#include "gmlp/tokenizer.h"

namespace gmlp {

// BERT masking of one sequence of T ids. Eligible positions are those whose id is not
// special (so [PAD] and any [MASK] already there are never chosen). Exactly
// k = max(1, round(mask_prob * eligible)) of them are chosen, uniformly without
// replacement (none when no position is eligible); of the chosen, each independently
// becomes [MASK] with probability 0.8, a uniformly random non-special id with 0.1, or
// stays as it is with 0.1. inputs[t] = the corrupted id, targets[t] = in[t] at chosen
// positions and -1 elsewhere. `inputs` may be `in`. Returns k. Error when the tokenizer
// has no [MASK], mask_prob is outside (0, 1], or an id is outside the vocabulary.
int mask_tokens(const int32_t* in, int T, int32_t* inputs, int32_t* targets, const Tokenizer& tok, Rng& rng,
                float mask_prob = 0.15f);

}  // namespace gmlp
