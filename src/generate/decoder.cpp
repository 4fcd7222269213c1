// The cached decoder, written once over the model's backend. prefill() is the training
// forward on one sequence, keeping each layer's normalised gate (and aMLP's q|k|v rows);
// step() is the one-token ops of ops.h (decode.cpp) over the rows of the streams
// stepped. On the CPU the buffers are host memory and nothing is copied; on a device
// the caches never leave it.
#include "gmlp/decoder.h"

#include <algorithm>
#include <cstring>

#include "gmlp/error.h"
#include "backend/backend.h"
#include "model/block.h"
#include "ops/ops.h"

namespace gmlp {

struct Decoder::State {
  Backend& be;
  ParamViews w;  // the backend's weights
  int g = 0, goff = 0;  // gate channels, the gate's offset in Z
  DeviceBuffer<float> pe;
  std::vector<DeviceBuffer<float>> gates;  // per layer [streams, n, g]: the normalised gate rows (SGU models)
  std::vector<DeviceBuffer<float>> qkv;    // per layer [streams, n, 3 d_attn]: the attention's q|k|v rows (aMLP)
  // Scratch: prefill uses [n, ...] rows, step one row per stream stepped.
  DeviceBuffer<float> x, h, u, z, F, S, out, gstats, Wd, P, O, A;
  // A step's index arrays, [4][R] for its R rows: token ids, streams, positions, cache
  // rows (stream * n + position); a prefill's token ids alone. Copied to the backend
  // once per call (used in place on the CPU).
  std::vector<int32_t> idx;
  DeviceBuffer<int32_t> idx_dev;
  std::vector<float> logits, out_host;  // [streams, V] on the host; a device step's rows read back

  explicit State(Backend& b) : be(b) {}
  const int32_t* upload_idx(size_t count) {
    if (be.host_memory()) return idx.data();
    be.upload(idx_dev.data(), idx.data(), sizeof(int32_t) * count);
    return idx_dev.data();
  }
  // R rows of backend memory, as host floats.
  const float* read(const float* p, size_t count) {
    if (be.host_memory()) return p;
    if (out_host.size() < count) out_host.resize(count);
    be.download(out_host.data(), p, sizeof(float) * count);
    return out_host.data();
  }
};

bool Decoder::supports(const ModelConfig& c) { return c.task == Task::causal_lm; }

Decoder::Decoder(const Model& model, int streams) : cfg_(model.config()), streams_(streams) {
  require(supports(cfg_), "the cached decoder needs a causal language model; this one is \"" + name_of(cfg_.task) + "\"");
  require(streams >= 1 && streams <= 4096, "a decoder holds 1 to 4096 streams, not " + std::to_string(streams));
  st_ = std::make_unique<State>(model.backend());
  State& st = *st_;
  Backend& be = st.be;
  st.w = model.backend_views();
  const size_t n = size_t(cfg_.seq_len), d = size_t(cfg_.d_model), f = size_t(cfg_.d_ffn),
               L = size_t(cfg_.n_layers), da = size_t(cfg_.d_attn), S = size_t(streams), rows = std::max(n, S);
  st.g = cfg_.gate_channels();
  st.goff = cfg_.sgu == Sgu::split ? cfg_.d_ffn / 2 : 0;
  const size_t g = size_t(st.g), s = size_t(cfg_.branch_channels());
  if (cfg_.has_sgu()) {
    for (size_t l = 0; l < L; ++l) st.gates.emplace_back(be, S * n * g);
    st.F = DeviceBuffer<float>(be, rows * g);
    st.gstats = DeviceBuffer<float>(be, 2 * n);
  }
  if (da > 0) {
    for (size_t l = 0; l < L; ++l) st.qkv.emplace_back(be, S * n * 3 * da);
    st.P = DeviceBuffer<float>(be, rows * n);  // prefill: [n, n]; step: [streams, n]
    st.O = DeviceBuffer<float>(be, rows * da);
    st.A = DeviceBuffer<float>(be, rows * g);
  }
  st.x = DeviceBuffer<float>(be, rows * d);
  st.h = DeviceBuffer<float>(be, rows * d);
  st.u = DeviceBuffer<float>(be, rows * f);
  st.z = DeviceBuffer<float>(be, rows * f);
  st.S = DeviceBuffer<float>(be, n * s);
  st.out = DeviceBuffer<float>(be, S * size_t(cfg_.vocab_size));
  st.logits.assign(S * size_t(cfg_.vocab_size), 0.f);
  st.idx.assign(4 * rows, 0);
  if (!be.host_memory()) st.idx_dev = DeviceBuffer<int32_t>(be, 4 * rows);
  len_.assign(S, 0);
  if (cfg_.pos_embedding == PosEmbedding::sinusoidal) {
    std::vector<float> pe(n * d);
    ops::sinusoidal_positions(cfg_.seq_len, cfg_.d_model, pe.data());
    st.pe = DeviceBuffer<float>(be, n * d);
    be.upload(st.pe.data(), pe.data(), sizeof(float) * pe.size());
  }
}

Decoder::~Decoder() = default;
Decoder::Decoder(Decoder&&) noexcept = default;
Decoder& Decoder::operator=(Decoder&&) noexcept = default;

void Decoder::reset() { std::fill(len_.begin(), len_.end(), 0); }

const float* Decoder::prefill(const int32_t* tokens, int T, int stream) {
  require(stream >= 0 && stream < streams_, "prefill: no stream " + std::to_string(stream));
  require(T >= 1 && T <= cfg_.seq_len, "prefill: " + std::to_string(T) + " tokens do not fit the window of " +
                                           std::to_string(cfg_.seq_len));
  const int n = cfg_.seq_len, d = cfg_.d_model, V = cfg_.vocab_size;
  for (int t = 0; t < T; ++t)
    require(tokens[t] >= 0 && tokens[t] < V,
            [&] { return "prefill: token id " + std::to_string(tokens[t]) + " outside the vocabulary"; });
  State& st = *st_;
  Backend& be = st.be;
  const size_t sidx = size_t(stream);
  len_[sidx] = 0;
  std::copy(tokens, tokens + T, st.idx.begin());
  float* x = st.x.data();
  be.embedding_forward(st.w.embed, d, st.upload_idx(size_t(T)), T, 1, st.pe.data(), x);
  // Toeplitz weights are expanded for this prefill's T only, never for the whole window:
  // a model with a long window and a short prompt stays small.
  const size_t wd = cfg_.spatial == Spatial::toeplitz ? size_t(cfg_.sgu_heads) * T * T : 0;
  if (st.Wd.size() < wd) st.Wd = DeviceBuffer<float>(be, wd);
  BlockCall call;
  call.T = T;
  call.B = 1;
  const BlockScratch scratch{st.h.data(), st.z.data(), st.S.data(), st.A.data(), st.Wd.data()};
  for (int l = 0; l < cfg_.n_layers; ++l) {
    // The training block, in place on x, with the layer's caches as its gate and q|k|v
    // buffers: prefill leaves exactly the rows step() extends.
    BlockSaved saved;
    saved.x = x;
    saved.u = st.u.data();
    saved.g_mean = st.gstats.data();
    saved.g_rstd = st.gstats.data() + (st.gstats.empty() ? 0 : n);
    saved.F = st.F.data();
    if (cfg_.d_attn > 0) {
      saved.qkv = st.qkv[size_t(l)].data() + sidx * n * 3 * cfg_.d_attn;
      saved.P = st.P.data();
      saved.O = st.O.data();
    }
    call.gate = cfg_.has_sgu() ? st.gates[size_t(l)].data() + sidx * n * st.g : nullptr;
    block_forward(be, cfg_, st.w.blocks[size_t(l)], call, saved, scratch, x);
  }
  len_[sidx] = T;
  be.decode_layernorm(x + size_t(T - 1) * d, d, 1, d, st.w.norm_w, st.w.norm_b, cfg_.norm_eps, st.h.data(), d,
                      nullptr);
  be.decode_linear(st.w.head_w, V, d, st.h.data(), 1, st.w.head_b, st.out.data(), false);
  float* row = st.logits.data() + sidx * V;
  std::memcpy(row, st.read(st.out.data(), size_t(V)), sizeof(float) * size_t(V));
  return row;
}

const float* Decoder::step(int32_t token) {
  require(streams_ == 1, "step(token) is for a one-stream decoder; this one has " + std::to_string(streams_));
  const int zero = 0;
  return step(&token, &zero, 1);
}

const float* Decoder::step(const int32_t* tokens, const int* which, int R) {
  const int n = cfg_.seq_len, d = cfg_.d_model, f = cfg_.d_ffn, V = cfg_.vocab_size;
  require(R >= 1 && R <= streams_, "step: " + std::to_string(R) + " streams asked of " + std::to_string(streams_));
  for (int r = 0; r < R; ++r) {
    const int s = which[r];
    require(s >= 0 && s < streams_, [&] { return "step: no stream " + std::to_string(s); });
    require(len_[size_t(s)] < n, [&] {
      return "step: the context of stream " + std::to_string(s) + " is full (" + std::to_string(n) + " tokens)";
    });
    require(tokens[r] >= 0 && tokens[r] < V,
            [&] { return "step: token id " + std::to_string(tokens[r]) + " outside the vocabulary"; });
    for (int q = 0; q < r; ++q)
      require(which[q] != s, [&] { return "step: stream " + std::to_string(s) + " given twice"; });
  }
  State& st = *st_;
  Backend& be = st.be;
  const int g = st.g;
  // Row r of every scratch buffer is stream which[r] at its position len_[which[r]].
  const size_t rows = size_t(R);
  for (int r = 0; r < R; ++r) {
    const int s = which[r], i = len_[size_t(s)];
    st.idx[size_t(r)] = tokens[r];
    st.idx[rows + size_t(r)] = s;
    st.idx[2 * rows + size_t(r)] = i;
    st.idx[3 * rows + size_t(r)] = s * n + i;
  }
  const int32_t* idx = st.upload_idx(4 * rows);
  const int32_t *tok = idx, *stream = idx + rows, *pos = idx + 2 * rows, *cache_row = idx + 3 * rows;
  float *x = st.x.data(), *h = st.h.data(), *u = st.u.data(), *z = st.z.data(), *F = st.F.data();
  be.decode_embed(st.w.embed, d, tok, pos, R, st.pe.data(), x);
  for (int l = 0; l < cfg_.n_layers; ++l) {
    const BlockParams& p = st.w.blocks[size_t(l)];
    be.decode_layernorm(x, d, R, d, p.norm_w, p.norm_b, cfg_.norm_eps, h, d, nullptr);
    be.decode_linear(p.proj_in_w, f, d, h, R, p.proj_in_b, u, false);
    be.gelu_forward(u, z, int64_t(f) * R, cfg_.gelu == Gelu::tanh);
    if (!cfg_.has_sgu()) {
      be.decode_linear(p.proj_out_w, d, f, z, R, p.proj_out_b, x, true);
      continue;
    }
    // The new gate rows join their streams' caches; F = b_k[i] + W_k[i, 0..i] G[0..i]
    // per head k is the only place the history enters.
    float* G = st.gates[size_t(l)].data();
    be.decode_layernorm(z + st.goff, f, R, g, p.sgu_norm_w, p.sgu_norm_b, cfg_.sgu_norm_eps, G, g, cache_row);
    be.decode_mix(G, n, g, cfg_.sgu_heads, p.spatial_w, cfg_.spatial_weight_size(), cfg_.spatial == Spatial::toeplitz,
                  p.spatial_b, stream, pos, R, F);
    if (cfg_.d_attn > 0) {
      ops::AttnParams ap{p.attn_qkv_w, p.attn_qkv_b, p.attn_out_w, p.attn_out_b, d, cfg_.d_attn, f / 2, true, nullptr};
      be.decode_attention(ap, h, stream, pos, R, n, st.qkv[size_t(l)].data(), st.P.data(), st.O.data(), st.A.data(),
                          F);
    }
    be.sgu_combine(cfg_.sgu, z, f, F, R, g, F);  // split: Z1 = z[0, g)
    be.decode_linear(p.proj_out_w, d, g, F, R, p.proj_out_b, x, true);
  }
  be.decode_layernorm(x, d, R, d, st.w.norm_w, st.w.norm_b, cfg_.norm_eps, h, d, nullptr);
  be.decode_linear(st.w.head_w, V, d, h, R, st.w.head_b, st.out.data(), false);
  const float* out = st.read(st.out.data(), size_t(R) * V);
  for (int r = 0; r < R; ++r) {
    ++len_[size_t(which[r])];
    std::memcpy(st.logits.data() + size_t(which[r]) * V, out + size_t(r) * V, sizeof(float) * size_t(V));
  }
  return st.logits.data();
}

}  // namespace gmlp
