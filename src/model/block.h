#pragma once
// One gMLP block (docs/model.md §1-3), forward and backward, written once for every
// caller: the model's training and inference passes, the cached decoder's prefill and,
// later, other backends. The caller owns the memory: per-layer tensors the backward
// needs (BlockSaved) and scratch shared by every layer (BlockScratch), as pointers into
// its own arena, in the spirit of llm.c's per-layer activation structs. Every op goes
// through the backend (backend/backend.h), so every pointer here is that backend's memory.
//
// Rows are tokens in sequence-major order (row = t * B + b), M = T * B.
#include <cstdint>

#include "gmlp/config.h"
#include "gmlp/model.h"
#include "ops/dropout_mask.h"

namespace gmlp {

class Backend;

// What one layer's forward keeps for its backward. With d = d_model, f = d_ffn,
// g = gate channels (ModelConfig::gate_channels), da = d_attn:
struct BlockSaved {
  const float* x = nullptr;                    // [M, d] the block's input (the residual stream)
  float *ln_mean = nullptr, *ln_rstd = nullptr;  // [M] the block LayerNorm's statistics (may be null
                                               //     in a forward that no backward follows)
  float* u = nullptr;                          // [M, f] the projection before the GELU; dU over
                                               //     it in the backward (may be BlockScratch::z
                                               //     without an SGU when no backward follows)
  float *g_mean = nullptr, *g_rstd = nullptr;  // [M] the gate LayerNorm's statistics (SGU models)
  float* F = nullptr;                          // [M, g] the spatial output, attention added (SGU models)
  // Or, training an SGU model where Backend::stores_bf16 (a GPU under bf16), U and F as
  // bf16 bits (ops.h's Bf16Store), u and F null: the two largest per-layer tensors in
  // half the bytes. The block's products then run over bf16 operands alone (block.cpp):
  // U is written in bf16 by its product and dU over it, the other operands are in
  // BlockScratch's *16 buffers and BlockCall's weight copies; F is written in bf16 by
  // the spatial products.
  uint16_t *u16 = nullptr, *F16 = nullptr;     // [M, f], [M, g]
  // With them, where given, the block LayerNorm's output h and the normalised gate G in
  // bf16 as the forward wrote them for its products, so that the backward's products
  // read them rather than rebuild them (a pass over x, and one over U with GELU, per
  // layer: on a GPU the step is bound by memory; block.cpp).
  uint16_t *h16 = nullptr, *G16 = nullptr;     // [M, d], [M, g]
  float *qkv = nullptr, *P = nullptr, *O = nullptr;  // aMLP: [M, 3da], [B, T, T], [M, da]
};

// Scratch reused by every layer; s = branch channels (ModelConfig::branch_channels).
struct BlockScratch {
  float* h = nullptr;    // [M, d] LayerNorm output; the stochastic-depth branch
  float* z = nullptr;    // [M, f] Z = GELU(U), for models without an SGU (the SGU reads U)
  float* S = nullptr;    // [M, s] S; also the gate G when BlockCall::gate is null
  float* att = nullptr;  // [M, g] aMLP: the attention's output
  float* Wd = nullptr;   // Toeplitz: dense [heads, T, T]
  // Where BlockSaved holds U in bf16:
  uint16_t* h16 = nullptr;  // [M, d] the LayerNorm output in bf16 where BlockSaved keeps none (h holds
                            //   it as floats too for aMLP's attention alone); in the backward
                            //   first dL/d(branch) in bf16
  uint16_t* S16 = nullptr;  // [M, s] S in bf16, and before it the gate G where BlockSaved keeps none
                            //   (scratch.S then unused)
  uint16_t* dF16 = nullptr; // [M, g] dL/dF in bf16 (scratch.dF then holds dL/dF as floats too,
                            //   for aMLP's attention alone)
  uint16_t *dS16 = nullptr, *dG16 = nullptr;  // [M, s], [M, g]: dL/dS and dL/dG in bf16 (dG16 where
                                              //   sgu_needs_dG, else over dS16); dS and dG then unused
  // Backward only.
  float *dh = nullptr, *dS = nullptr;              // [M, d], [M, s]
  float *dF = nullptr, *dG = nullptr;              // [M, g], where sgu_needs_dF / sgu_needs_dG
  float *dO = nullptr, *dP = nullptr, *dqkv = nullptr;  // aMLP: [M, da], [R, T, T], [M, 3da]
                                                   //   (R = Backend::attention_rows_at_once);
  float* dWd = nullptr;                            // Toeplitz: dense [heads, T, T]
};

// Which backward scratch the SGU needs of its own, decided here for the arena that
// allocates it (model.cpp) and the backward that uses it (block.cpp). dL/dF goes over F,
// dead once the gate pass has read it, but for the multiplicative form, whose gate
// LayerNorm's backward reads F again; where F is held in bf16, dL/dF is held in bf16
// too (ops.h's Bf16Store) and as floats only for aMLP's attention. dL/dG over dS for
// the split form (ops.h: only the other forms read dS again).
inline bool sgu_needs_dF(const ModelConfig& c, bool bf16_store = false) {
  if (!c.has_sgu()) return false;
  return bf16_store ? c.d_attn > 0 : c.sgu == Sgu::multiplicative;
}
inline bool sgu_needs_dG(const ModelConfig& c) { return c.has_sgu() && c.sgu != Sgu::split; }

struct BlockCall {
  int T = 0, B = 0;
  const int32_t* lengths = nullptr;  // [B] real tokens per row (padded bidirectional batches), or null
  const float* keep = nullptr;       // [B] this layer's stochastic-depth multipliers (0 or 1/p), or null
  ops::DropMask drop;                // this layer's dropout on the branch, inactive without
  float* gate = nullptr;             // [M, g] where the normalised gate goes (the decoder's cache), or
                                     // null for scratch.S
  // proj_in_w [f, d] and proj_out_w [d, s] in bf16, where BlockSaved holds U in bf16.
  const uint16_t *proj_in_w16 = nullptr, *proj_out_w16 = nullptr;
  // With them, the spatial W's copies for this T (ops.h's SguParams::w16), or null.
  const uint16_t* spatial_w16 = nullptr;
  // Stochastic depth under bf16, training without dropout or aMLP (model.cpp): a block
  // leaves its residual to the next (leave_residual: its branch left in scratch.h, out not
  // written), whose LayerNorm forms it as it reads x: saved.x = x_before + keep_before[b]
  // scratch.h, written to x_into (saved.x's memory). A pass over the rows fewer a block.
  bool leave_residual = false;
  const float *x_before = nullptr, *keep_before = nullptr;
  float* x_into = nullptr;
};

// out[M, d] = x + block(x), with x = saved.x; out may be saved.x (in place) when no
// backward follows. Fills the other BlockSaved tensors. Where the call says so, x is
// first formed from the block before's residual (into call.x_into, saved.x's memory), and
// out is left unwritten, the residual left in scratch.h to the next block (BlockCall).
void block_forward(Backend& be, const ModelConfig& c, const BlockParams& p, const BlockCall& call, const BlockSaved& saved,
                   const BlockScratch& s, float* out);

// dx [M, d] holds dL/d(out) on entry and dL/d(x) on return; parameter gradients are
// accumulated into gp. Needs the BlockSaved of a forward with the same call.
void block_backward(Backend& be, const ModelConfig& c, const BlockParams& p, const BlockParams& gp, const BlockCall& call,
                    const BlockSaved& saved, const BlockScratch& s, float* dx);

}  // namespace gmlp
