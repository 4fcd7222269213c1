// How gemm multiplies on the CPU: which library runs fp32 products (OpenBLAS, or
// oneDNN where OpenBLAS runs narrower kernels than the CPU has), the product precision,
// bf16 rounding, and the bf16 product on the CPU's own instructions through oneDNN
// (AVX512-BF16 or AMX; oneDNN picks the kernel at run time). ops.h says what each
// precision computes.
#include <cblas.h>
#include <cpuid.h>
#include <pthread.h>
#include <signal.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "gmlp/error.h"
#include "ops/bf16.h"
#include "ops/ops.h"
#include "ops/parallel.h"

#ifdef GMLP_HAVE_DNNL
#include <algorithm>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl.hpp>
#if DNNL_VERSION_MAJOR != 2
#error "gmlp's bf16 products are written for oneDNN 2.x (output scales, matmul::desc); CMake checks the version"
#endif
#include <vector>
#endif

namespace gmlp::ops {
namespace {
Products g_products = Products::fp32;

// Why oneDNN cannot run, whatever asked for it.
constexpr const char* kNoOneDnn =
    "this build of gmlp has no oneDNN 2.x (run scripts/setup.sh, which installs libdnnl-dev, and rebuild)";

// "OpenBLAS, Haswell kernels": the library and the kernels it picked when it loaded.
std::string openblas_kernels() { return std::string("OpenBLAS, ") + openblas_get_corename() + " kernels"; }

// OpenBLAS's kernels that use AVX-512 (its core names, openblas_get_corename()).
bool openblas_runs_avx512() {
  const std::string core = openblas_get_corename();
  return core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids";
}

// oneDNN's JIT would use AVX-512 here (its ISA masks include avx512_core's bits).
bool onednn_runs_avx512() {
#ifdef GMLP_HAVE_DNNL
  return (unsigned(dnnl_get_effective_cpu_isa()) & unsigned(dnnl_cpu_isa_avx512_core)) ==
         unsigned(dnnl_cpu_isa_avx512_core);
#else
  return false;
#endif
}

struct EngineChoice {
  Fp32Engine engine;
  std::string why;
};

EngineChoice initial_engine() {
  if (const char* env = std::getenv("GMLP_CPU_GEMM")) {
    const std::string v = env;
    if (v == "openblas") return {Fp32Engine::openblas, openblas_kernels() + " (GMLP_CPU_GEMM=openblas)"};
    if (v == "onednn") {
      require(have_onednn(), std::string("GMLP_CPU_GEMM=onednn: ") + kNoOneDnn);
      return {Fp32Engine::onednn, "oneDNN (GMLP_CPU_GEMM=onednn)"};
    }
    throw Error("GMLP_CPU_GEMM='" + v + "' is not one of openblas, onednn (unset: gmlp chooses)");
  }
  if (have_onednn() && onednn_runs_avx512() && !openblas_runs_avx512())
    return {Fp32Engine::onednn, std::string("oneDNN, AVX-512 (OpenBLAS runs ") + openblas_get_corename() +
                                    " kernels on this AVX-512 CPU)"};
  return {Fp32Engine::openblas, openblas_kernels()};
}

const EngineChoice& first_choice() {
  static const EngineChoice c = initial_engine();
  return c;
}

EngineChoice& engine_choice() {
  static EngineChoice c = first_choice();
  return c;
}
}  // namespace

Fp32Engine fp32_engine() { return engine_choice().engine; }

const std::string& fp32_engine_description() { return engine_choice().why; }

void set_fp32_engine(Fp32Engine e) {
  require(e == Fp32Engine::openblas || have_onednn(), std::string("fp32 products on oneDNN: ") + kNoOneDnn);
  if (e == first_choice().engine) engine_choice() = first_choice();  // back to the process's own choice
  else
    engine_choice() = {e, e == Fp32Engine::onednn ? "oneDNN (set by the caller)"
                                                   : openblas_kernels() + " (set by the caller)"};
}

void set_products(Products p) {
  if (p == Products::bf16)
    if (const char* why = bf16_unavailable()) throw Error(std::string("bf16 products: ") + why);
  g_products = p;
}

Products products() { return g_products; }

// CPUID leaf 7: AMX-BF16 is subleaf 0, EDX bit 22; AVX512-BF16 subleaf 1, EAX bit 5.
// Asked once: CPUID is slow (under a hypervisor it traps), and gemm_onednn asks per product.
bool cpu_has_bf16() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if ((d >> 22) & 1u) return true;
    const unsigned subleaves = a;
    return subleaves >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1u);
  }();
  return has;
}

bool have_onednn() {
#ifdef GMLP_HAVE_DNNL
  return true;
#else
  return false;
#endif
}

const char* bf16_unavailable() {
  if (!cpu_has_bf16()) return "this CPU has no bf16 matrix instructions (neither AVX512-BF16 nor AMX-BF16)";
  static const std::string no_onednn = std::string("this CPU has bf16 instructions, but ") + kNoOneDnn;
  if (!have_onednn()) return no_onednn.c_str();
  return nullptr;
}

namespace {
inline float rounded(float x) { return from_bf16(to_bf16(x)); }

// rows x cols of x (rows ld apart) into the dense out, each value through f.
template <typename E, typename F>
void dense_copy(const float* x, int rows, int cols, int ld, E* out, F f) {
  parallel_for_if(rows, int64_t(rows) * cols, kParallelValues, [&](int i) {
    const float* r = x + int64_t(i) * ld;
    E* o = out + int64_t(i) * cols;
#pragma omp simd
    for (int j = 0; j < cols; ++j) o[j] = f(r[j]);
  });
}
}  // namespace

uint16_t bf16_bits(float x) { return to_bf16(x); }
float round_to_bf16(float x) { return rounded(x); }

void round_to_bf16(const float* x, int rows, int cols, int ld, float* out) {
  dense_copy(x, rows, cols, ld, out, [](float v) { return rounded(v); });  // a lambda: inlined in the loop
}

#ifdef GMLP_HAVE_DNNL
namespace {

// "fp32 product 2048x128 by 128x512": what failed, in an error message.
std::string product_name(const char* type, int M, int N, int K) {
  return std::string(type) + " product " + std::to_string(M) + "x" + std::to_string(K) + " by " + std::to_string(K) +
         "x" + std::to_string(N);
}

// Asynchronous signals wait while this thread runs oneDNN's JIT code. A SIGTERM handled
// in the middle of a training step's oneDNN SGEMM corrupted the heap about every other
// time (glibc: "free(): invalid size", abort: 6 of 12 runs of gmlp train stopped by
// SIGTERM; 0 of 6 on OpenBLAS; 0 of 12 with this), as if the JIT code kept data below
// its stack pointer where the kernel writes the signal frame. Held for the length of a
// product (microseconds to milliseconds), a signal is handled right after it, by this
// thread or another. Faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT) are
// never held.
class SignalsHeld {
 public:
  SignalsHeld() {
    static const sigset_t held = [] {
      sigset_t s;
      sigfillset(&s);
      for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT}) sigdelset(&s, sig);
      return s;
    }();
    pthread_sigmask(SIG_BLOCK, &held, &saved_);
  }
  ~SignalsHeld() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }
  SignalsHeld(const SignalsHeld&) = delete;
  SignalsHeld& operator=(const SignalsHeld&) = delete;

 private:
  sigset_t saved_;
};

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

// One product's inputs' type, shape and scalars; the copies of A and B it multiplies
// are dense, so their strides follow from the shape.
struct Shape {
  bool bf16, ta, tb;
  int M, N, K, ldc;
  float alpha, beta;
  auto operator<=>(const Shape&) const = default;
};

// The scratchpad is the caller's (a buffer per thread), so that products of different
// shapes may run on several threads at once whatever oneDNN was built with.
struct Product {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c, scratch;
};

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// Making a primitive costs far more than a small product, and a model has a few dozen
// shapes: they are kept. The handles are reference counted, so a caller's copy stays
// valid if the cache is emptied (it is, should a caller's shapes run into thousands).
Product product_for(const Shape& s) {
  static std::mutex mu;
  static std::map<Shape, Product> cache;
  std::lock_guard lock(mu);
  if (auto it = cache.find(s); it != cache.end()) return it->second;
  const dt in = s.bf16 ? dt::bf16 : dt::f32;
  Product p;
  p.a = dnnl::memory::desc({s.M, s.K}, in, s.ta ? dims{1, s.M} : dims{s.K, 1});
  p.b = dnnl::memory::desc({s.K, s.N}, in, s.tb ? dims{1, s.K} : dims{s.N, 1});
  p.c = dnnl::memory::desc({s.M, s.N}, dt::f32, dims{s.ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (s.alpha != 1.f) attr.set_output_scales(0, {s.alpha});
  if (s.beta != 0.f) {
    dnnl::post_ops po;
    po.append_sum(s.beta);
    attr.set_post_ops(po);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.a, p.b, p.c), attr, engine());
  p.prim = dnnl::matmul(pd);
  p.scratch = pd.scratchpad_desc();
  if (cache.size() >= 4096) cache.clear();
  cache.emplace(s, p);
  return p;
}

// rows x cols of x (rows ld apart), dense: as bf16 bits, or as they are.
template <typename E>
void dense(const float* x, int rows, int cols, int ld, std::vector<E>& out) {
  out.resize(size_t(rows) * cols);
  if constexpr (sizeof(E) == 2) dense_copy(x, rows, cols, ld, out.data(), [](float v) { return E(to_bf16(v)); });
  else dense_copy(x, rows, cols, ld, out.data(), [](float v) { return v; });
}

template <typename E>
void onednn_product(const Shape& s, const float* A, int lda, const float* B, int ldb, float* C) {
  thread_local std::vector<E> ad, bd;
  dense(A, s.ta ? s.K : s.M, s.ta ? s.M : s.K, lda, ad);
  dense(B, s.tb ? s.N : s.K, s.tb ? s.K : s.N, ldb, bd);
  try {
    const Product p = product_for(s);
    thread_local dnnl::stream stream(engine());
    thread_local std::vector<char> scratch;
    scratch.resize(std::max<size_t>(scratch.size(), p.scratch.get_size()));
    dnnl::memory a(p.a, engine(), ad.data()), b(p.b, engine(), bd.data()), c(p.c, engine(), C),
        pad(p.scratch, engine(), scratch.data());
    const SignalsHeld held;
    p.prim.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}, {DNNL_ARG_SCRATCHPAD, pad}});
    stream.wait();
  } catch (const dnnl::error& e) {
    throw Error(product_name(s.bf16 ? "bf16" : "fp32", s.M, s.N, s.K) + " on oneDNN: " + e.what());
  }
}

}  // namespace

void sgemm_onednn(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                  const float* B, int ldb, float beta, float* C, int ldc) {
  // Row-major, like cblas; no primitive to make or cache: oneDNN's JIT SGEMM for the CPU.
  // Inside a parallel region it runs on the calling thread.
  const SignalsHeld held;
  const dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb,
                                      beta, C, ldc);
  if (st != dnnl_success)
    throw Error(product_name("fp32", M, N, K) + " on oneDNN failed (status " + std::to_string(int(st)) + ")");
}

void gemm_onednn(bool bf16, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  const Shape s{bf16, trans_a, trans_b, M, N, K, ldc, alpha, beta};
  if (!bf16) return onednn_product<float>(s, A, lda, B, ldb, C);
  if (const char* why = bf16_unavailable()) throw Error(std::string("bf16 products: ") + why);
  onednn_product<uint16_t>(s, A, lda, B, ldb, C);
}
#else
namespace {
[[noreturn]] void no_onednn() { throw Error(std::string("oneDNN products: ") + kNoOneDnn); }
}  // namespace
void sgemm_onednn(bool, bool, int, int, int, float, const float*, int, const float*, int, float, float*, int) {
  no_onednn();
}
void gemm_onednn(bool, bool, bool, int, int, int, float, const float*, int, const float*, int, float, float*, int) {
  no_onednn();
}
#endif

}  // namespace gmlp::ops
