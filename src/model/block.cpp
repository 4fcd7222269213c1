// The gMLP block, forward and backward (derivations in docs/backward.md).
//
// The forward keeps only what block.h's BlockSaved lists; the backward rebuilds the
// rest (LayerNorm outputs, the normalised gate, S) from it: elementwise work that is
// cheap next to the GEMMs on a CPU and saves several [M, d_ffn] buffers per layer. On
// a GPU under bf16, where a step is bound by memory, the forward's bf16 h and G are
// kept per layer (BlockSaved::h16, G16) and only S is rebuilt. Z = GELU(U)
// is never stored: the SGU's ops take U and apply GELU (and, backward, its derivative)
// as they read each row. Scratch buffers whose lifetimes do not overlap are shared: the
// gate G lives in S's buffer (where not kept), dU is computed in place over U and dF
// over F. Where U and F are held in bf16 (BlockSaved::u16), every product's operands
// are bf16 too: h (saved.h16), U written by its product and dU over it, S (scratch.S16)
// and the gate (saved.G16), dL/dF (scratch.dF16), dY rounded into scratch.h16 and the
// weights' copies (BlockCall), so the products read half the bytes; F is written in
// bf16 by its products (saved.F16) and no float F exists; aMLP's float dF is scratch.dF.
#include "model/block.h"

#include "backend/backend.h"

namespace gmlp {
namespace {

// The SGU's op parameters for a call of length T. Toeplitz weights are expanded first
// into Wd, dense [heads, T, T]; full weights are read in place as W[:T, :T].
ops::SguParams sgu_params(Backend& be, const ModelConfig& c, const BlockParams& p, const BlockCall& call,
                          const BlockSaved& saved, const BlockScratch& s) {
  const int T = call.T;
  float* Wd = s.Wd;
  ops::SguParams sp;
  if (saved.u16) {  // G the layer's own or in S's buffer, dG over dS where block.h says (ops.h)
    sp.store = {saved.u16, saved.F16, s.S16,  saved.G16 ? saved.G16 : s.S16,
                s.dF16,    s.dS16,    sgu_needs_dG(c) ? s.dG16 : s.dS16, saved.G16 != nullptr};
    sp.store.F_unbiased = c.d_attn == 0;  // F's bias added as F is read: one pass and one rounding less
  }
  sp.kind = c.sgu;
  sp.norm_w = p.sgu_norm_w;
  sp.norm_b = p.sgu_norm_b;
  sp.bias = p.spatial_b;
  sp.n = c.seq_len;
  sp.heads = c.sgu_heads;
  sp.causal = c.causal();
  sp.lengths = call.lengths;
  sp.eps = c.sgu_norm_eps;
  sp.z = {true, c.gelu, p.proj_in_b};  // the block hands the SGU U; Z = GELU(U + b) is never stored
  if (c.spatial == Spatial::toeplitz) {
    const int64_t wsz = c.spatial_weight_size();
    for (int k = 0; k < c.sgu_heads; ++k)
      be.toeplitz_materialize(p.spatial_w + k * wsz, c.seq_len, c.causal(), T, Wd + int64_t(k) * T * T);
    sp.W = Wd;
    sp.ldw = T;
    sp.w_head_stride = int64_t(T) * T;
  } else {
    sp.W = p.spatial_w;
    sp.ldw = c.seq_len;
    sp.w_head_stride = int64_t(c.seq_len) * c.seq_len;
    if (saved.u16) sp.w16 = call.spatial_w16;
  }
  return sp;
}

ops::AttnParams attn_params(const ModelConfig& c, const BlockParams& p, const int32_t* lengths) {
  return {p.attn_qkv_w, p.attn_qkv_b, p.attn_out_w, p.attn_out_b, c.d_model, c.d_attn, c.d_ffn / 2, c.causal(),
          lengths};
}

}  // namespace

void block_forward(Backend& be, const ModelConfig& c, const BlockParams& p, const BlockCall& call, const BlockSaved& saved,
                   const BlockScratch& s, float* out) {
  const int T = call.T, B = call.B, M = T * B, d = c.d_model, f = c.d_ffn, nb = c.branch_channels();
  const bool tanh_gelu = c.gelu == Gelu::tanh;
  const float* x = saved.x;
  const bool bf16 = saved.u16 != nullptr;
  if (bf16) {  // h in bf16 (and as floats for the attention alone), U = h W^T rounded
    uint16_t* h16 = saved.h16 ? saved.h16 : s.h16;
    if (call.x_before)  // x formed from the residual the block before left in s.h (block.h)
      be.residual_keep_layernorm_bf16(call.x_before, call.keep_before, s.h, M, B, d, call.x_into, p.norm_w, p.norm_b,
                                      c.norm_eps, h16, saved.ln_mean, saved.ln_rstd);
    else
      be.layernorm_forward_bf16(x, d, M, d, p.norm_w, p.norm_b, c.norm_eps, c.d_attn > 0 ? s.h : nullptr, h16, d,
                                saved.ln_mean, saved.ln_rstd);
    be.gemm_bf16(false, true, M, f, d, h16, d, call.proj_in_w16, d, saved.u16, f);
  } else {
    be.layernorm_forward(x, d, M, d, p.norm_w, p.norm_b, c.norm_eps, s.h, d, saved.ln_mean, saved.ln_rstd);
    be.gemm(false, true, M, f, d, 1.f, s.h, d, p.proj_in_w, d, 0.f, saved.u, f);
  }
  const float* branch = s.z;  // s(Z) = Z for "none"
  if (c.has_sgu()) {
    const float* extra = nullptr;
    if (c.d_attn > 0) {
      be.tiny_attention_forward(attn_params(c, p, call.lengths), s.h, T, B, saved.qkv, saved.P, saved.O, s.att);
      extra = s.att;
    }
    // The SGU takes Z = GELU(U + the projection's bias) as it reads U's rows.
    const auto sp = sgu_params(be, c, p, call, saved, s);
    be.sgu_forward(sp, saved.u, T, B, f, s.S, saved.g_mean, saved.g_rstd, saved.F, call.gate ? call.gate : s.S,
                   extra);  // under bf16 F goes to saved.F16 (the store) alone
    branch = s.S;
  } else {
    be.bias_gelu_forward(saved.u, p.proj_in_b, M, f, s.z, tanh_gelu);
  }
  if (!call.keep && !call.drop.active()) {
    // x' = x + S V^T + v: seed the output with residual + bias, then let the GEMM add
    // (under bf16 one op, which a GPU does as one product).
    if (bf16) {
      be.linear_residual_bf16(s.S16, M, nb, call.proj_out_w16, p.proj_out_b, d, x, out);
    } else {
      be.residual_bias(x, p.proj_out_b, M, d, out);
      be.gemm(false, true, M, d, nb, 1.f, branch, nb, p.proj_out_w, nb, 1.f, out, d);
    }
  } else {
    // Stochastic depth and dropout: x' = x + keep[b] * mask (S V^T + v), the branch built in h.
    if (bf16)
      be.linear_forward_bf16(s.S16, M, nb, call.proj_out_w16, p.proj_out_b, d, s.h);
    else
      be.linear_forward(branch, M, nb, p.proj_out_w, p.proj_out_b, d, s.h);
    if (call.drop.active())
      be.residual_dropout(x, s.h, call.keep, call.drop, M, B, d, out);
    else if (!call.leave_residual)
      be.residual_keep(x, call.keep, s.h, M, B, d, out);
  }
}

void block_backward(Backend& be, const ModelConfig& c, const BlockParams& p, const BlockParams& gp, const BlockCall& call,
                    const BlockSaved& saved, const BlockScratch& s, float* dx) {
  const int T = call.T, B = call.B, M = T * B, d = c.d_model, f = c.d_ffn, nb = c.branch_channels();
  const bool tanh_gelu = c.gelu == Gelu::tanh;
  const float* x = saved.x;
  // dx holds dL/d(block output); the residual passes it to the input unchanged, and the
  // branch's contribution is added by the block LayerNorm's backward at the end.
  const bool bf16 = saved.u16 != nullptr;
  // Under bf16 stochastic depth's dY = keep[b] dx is taken as dY is rounded (below), not
  // in a pass of its own: nothing else reads dY as floats there.
  const bool keep_as_read = bf16 && call.keep && !call.drop.active();
  const float* dY = dx;
  if ((call.keep && !keep_as_read) || call.drop.active()) {
    if (call.drop.active())
      be.residual_dropout_backward(dx, call.keep, call.drop, M, B, d, s.dh);
    else
      be.scale_rows(call.keep, dx, M, B, d, s.dh);
    dY = s.dh;
  }
  float* dF = sgu_needs_dF(c, bf16) ? s.dF : saved.F;  // block.h
  float* dU = saved.u;  // over U (in bf16 over saved.u16: the SGU's ops write it there)
  if (c.has_sgu()) {
    const bool toeplitz = c.spatial == Spatial::toeplitz;
    auto sp = sgu_params(be, c, p, call, saved, s);
    sp.z.dbias = gp.proj_in_b;  // dU's column sums, taken as the SGU writes dU's rows
    // proj_out's backward around the SGU's pass over the rows: dS = dY V first (as
    // linear_backward would), then the pass that forms dF and dU1 rebuilds S from U and F
    // (the forward kept neither S nor Z = GELU(U)), then dV = dY^T S and dv. dU goes over
    // U (nothing reads U after this layer's backward). Under bf16 the products read dY
    // rounded once into h16's scratch (the in-projection's read the h the forward kept,
    // or rebuilt there below) and S in bf16.
    if (bf16) {
      // The bias's gradient as dY is read.
      be.to_bf16_summing_columns(dY, M, d, s.h16, gp.proj_out_b, keep_as_read ? call.keep : nullptr, B);
      be.gemm_bf16(false, false, M, nb, d, s.h16, d, call.proj_out_w16, nb, s.dS16, nb);
    } else {
      be.gemm(false, false, M, nb, d, 1.f, dY, d, p.proj_out_w, nb, 0.f, s.dS, nb);
    }
    // Under bf16 dL/dF goes to dF16, and to dF as floats for the attention alone.
    be.sgu_backward_gate(sp, s.dS, saved.u, T, B, f, saved.F, s.S, bf16 && c.d_attn == 0 ? nullptr : dF, dU);
    if (bf16)
      be.linear_backward_bf16(s.h16, nullptr, s.S16, M, nb, call.proj_out_w16, d, nullptr, false, gp.proj_out_w,
                              nullptr);
    else
      be.linear_backward(dY, s.S, M, nb, p.proj_out_w, d, nullptr, false, gp.proj_out_w, gp.proj_out_b);
    if (toeplitz) be.zero(s.dWd, sizeof(float) * size_t(c.sgu_heads) * T * T);
    const ops::SguGrads sg{gp.sgu_norm_w, gp.sgu_norm_b, toeplitz ? s.dWd : gp.spatial_w, gp.spatial_b};
    // G in S's buffer (S is dead once dV is formed); dG over dS where block.h says.
    float* dG = sgu_needs_dG(c) ? s.dG : s.dS;
    be.sgu_backward_mix(sp, sg, s.dS, saved.u, T, B, f, saved.g_mean, saved.g_rstd, saved.F, dU, s.S, dF, dG);
    if (toeplitz)
      for (int k = 0; k < c.sgu_heads; ++k)
        be.toeplitz_fold(s.dWd + size_t(k) * T * T, T, c.seq_len, c.causal(),
                           gp.spatial_w + k * c.spatial_weight_size());
  } else {
    be.gelu_forward(saved.u, s.z, int64_t(M) * f, tanh_gelu);
    be.linear_backward(dY, s.z, M, nb, p.proj_out_w, d, s.dS, false, gp.proj_out_w, gp.proj_out_b);
    be.gelu_backward(saved.u, s.dS, saved.u, int64_t(M) * f, tanh_gelu);  // dU over U
  }
  if (bf16) {  // dh = dU W and dW += dU^T h over bf16 operands (the SGU summed dU)
    // h as the forward kept it, or rebuilt; aMLP's attention reads it as floats, rebuilt.
    uint16_t* h16 = saved.h16 ? saved.h16 : s.h16;
    if (!saved.h16)
      be.layernorm_apply_bf16(x, d, M, d, p.norm_w, p.norm_b, saved.ln_mean, saved.ln_rstd,
                              c.d_attn > 0 ? s.h : nullptr, h16, d);
    else if (c.d_attn > 0)
      be.layernorm_apply(x, d, M, d, p.norm_w, p.norm_b, saved.ln_mean, saved.ln_rstd, s.h, d);
    be.gemm_bf16(false, false, M, d, f, 1.f, saved.u16, f, call.proj_in_w16, d, 0.f, s.dh, d);
    be.gemm_bf16(true, false, f, d, M, 1.f, saved.u16, f, h16, d, 1.f, gp.proj_in_w, d);
  } else {
    be.layernorm_apply(x, d, M, d, p.norm_w, p.norm_b, saved.ln_mean, saved.ln_rstd, s.h, d);
    be.linear_backward(dU, s.h, M, d, p.proj_in_w, f, s.dh, false, gp.proj_in_w,
                       c.has_sgu() ? nullptr : gp.proj_in_b);  // with an SGU its backward summed dU
  }
  if (c.d_attn > 0) {
    const ops::AttnGrads ag{gp.attn_qkv_w, gp.attn_qkv_b, gp.attn_out_w, gp.attn_out_b};
    be.tiny_attention_backward(attn_params(c, p, call.lengths), ag, dF, s.h, T, B, saved.qkv, saved.P, saved.O, s.dh, s.dO,
                                 s.dP, s.dqkv);
  }
  be.layernorm_backward(s.dh, d, x, d, saved.ln_mean, saved.ln_rstd, p.norm_w, M, d, dx, d, true, gp.norm_w,
                          gp.norm_b);
}

}  // namespace gmlp
