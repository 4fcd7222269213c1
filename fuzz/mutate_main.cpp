// gmlp_mutate: the project's own mutation fuzzer for one reader (readers.h), for CI
// and for long runs without clang (docs/reliability.md). libFuzzer (scripts/fuzz.sh)
// steers by coverage; this one has no coverage, but it needs no second build, runs
// in the plain and the sanitizer builds alike, and is deterministic: run k of seed s
// is the same input on every machine, so a finding is reproduced by its numbers.
//
//   gmlp_mutate TARGET SEED_DIR RUNS [--seed S] [--work DIR] [--max-mb MB]
//
// Each run takes a seed file, stacks 1-6 mutations on it (bit flips, interesting
// integers and numbers, inserted JSON tokens, erased, duplicated and spliced ranges,
// deep nesting, truncation), writes it to DIR/input and reads it as TARGET does. A
// reader may refuse an input with gmlp::Error; any other exception (std::bad_alloc
// past MB of address space included), a crash, or an input that takes over 10 s is a
// finding: the input is kept as DIR/finding (or DIR/input, after a crash or a
// timeout) and the exit code is non-zero.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmlp/error.h"
#include "gmlp/files.h"
#include "readers.h"

namespace {

namespace fs = std::filesystem;
constexpr size_t kMaxLen = 1 << 16;

// splitmix64: a small deterministic generator, independent of the library's.
struct Gen {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n ? size_t(next() % n) : 0; }
};

const uint64_t kInts[] = {0,          1,          2,          0x7f,       0x80,       0xff,
                          0x7fff,     0x8000,     0xffff,     0x7fffffff, 0x80000000, 0xffffffff,
                          1ull << 32, 1ull << 40, ~0ull >> 1, ~0ull,      65536,      1000003};
const char* const kTokens[] = {"[",    "]",    "{",     "}",     "\"",   ",",        ":",          "-1",
                               "0",    "1e39", "NaN",   "null",  "true", "\"F32\"",  "\"shape\"", "[0,",
                               "\t",   "\n",   "\r",    "\\u0000", "\xef\xbb\xbf", "99999999999999999999",
                               "\xff", "\x1f\x8b", "P5\n", "\x89PNG\r\n\x1a\n", "4294967296", "-2147483648"};

void mutate_once(std::string& d, const std::vector<std::string>& seeds, Gen& g) {
  const size_t n = d.size();
  switch (g.below(9)) {
    case 0:  // flip a bit
      if (n) d[g.below(n)] ^= char(1u << g.below(8));
      break;
    case 1:  // a random byte
      if (n) d[g.below(n)] = char(g.below(256));
      break;
    case 2: {  // an interesting integer, 1, 2, 4 or 8 bytes, either byte order
      const size_t w = size_t(1) << g.below(4);
      if (n < w) break;
      const uint64_t v = kInts[g.below(std::size(kInts))];
      const size_t at = g.below(n - w + 1);
      const bool big = g.below(2);
      for (size_t i = 0; i < w; ++i) d[at + i] = char(v >> (8 * (big ? w - 1 - i : i)));
      break;
    }
    case 3:  // a token that matters to one of the formats
      d.insert(g.below(n + 1), kTokens[g.below(std::size(kTokens))]);
      break;
    case 4:  // erase a range
      if (n) {
        const size_t at = g.below(n);
        d.erase(at, 1 + g.below(std::min<size_t>(n - at, 64)));
      }
      break;
    case 5:  // duplicate a range elsewhere
      if (n) {
        const size_t at = g.below(n), len = 1 + g.below(std::min<size_t>(n - at, 256));
        d.insert(g.below(n + 1), d.substr(at, len));
      }
      break;
    case 6: {  // splice in a piece of another seed
      const std::string& o = seeds[g.below(seeds.size())];
      if (o.empty()) break;
      const size_t at = g.below(o.size());
      d.insert(g.below(n + 1), o.substr(at, 1 + g.below(std::min<size_t>(o.size() - at, 512))));
      break;
    }
    case 7: {  // nesting, shallow or deep
      const size_t depth = g.below(2) ? 1 + g.below(8) : 1000 + g.below(100000);
      d.insert(g.below(n + 1), std::string(depth, g.below(2) ? '[' : '{'));
      break;
    }
    case 8:  // truncate
      if (n) d.resize(g.below(n));
      break;
  }
  if (d.size() > kMaxLen) d.resize(kMaxLen);
}

std::string g_input;  // for the signal handlers: where the input that ended the process lies

void on_fatal(int sig) {
  const char* what = sig == SIGALRM ? "gmlp_mutate: FINDING: an input took over 10 s: " : "gmlp_mutate: FINDING: crash on ";
  (void)!::write(2, what, std::strlen(what));
  (void)!::write(2, g_input.data(), g_input.size());
  (void)!::write(2, "\n", 1);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

int usage(const char* msg) {
  std::fprintf(stderr, "gmlp_mutate: %s\nusage: gmlp_mutate TARGET SEED_DIR RUNS [--seed S] [--work DIR] [--max-mb MB]\n",
               msg);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) return usage("missing arguments");
  const std::string target = argv[1], seed_dir = argv[2];
  const long long runs = std::atoll(argv[3]);
  uint64_t seed = 1;
  std::string work = "/tmp/gmlp_mutate_" + std::to_string(::getpid());
  long long max_mb = 4096;
  for (int i = 4; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--seed") seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (k == "--work") work = argv[i + 1];
    else if (k == "--max-mb") max_mb = std::atoll(argv[i + 1]);
    else return usage(("unknown option " + k).c_str());
  }
  const auto& known = gmlp::fuzz::targets();
  if (std::find(known.begin(), known.end(), target) == known.end()) return usage(("unknown target " + target).c_str());

  std::vector<std::string> seeds;
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(seed_dir, ec))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());  // the same run k on every machine
  for (const auto& f : files) seeds.push_back(gmlp::read_file(f.string()));
  if (seeds.empty()) return usage(("no seed files in " + seed_dir).c_str());

  fs::create_directories(work, ec);
  g_input = (fs::path(work) / "input").string();
#if !defined(__SANITIZE_ADDRESS__)
  // A memory bomb must end in an Error, not in an allocation that takes the machine:
  // past this much address space, allocations throw std::bad_alloc, a finding.
  // (AddressSanitizer reserves terabytes of address space, so not under it.)
  if (max_mb > 0) {
    const rlimit lim{rlim_t(max_mb) << 20, rlim_t(max_mb) << 20};
    ::setrlimit(RLIMIT_AS, &lim);
  }
#endif
  ::signal(SIGSEGV, on_fatal);
  ::signal(SIGBUS, on_fatal);
  ::signal(SIGABRT, on_fatal);
  ::signal(SIGFPE, on_fatal);
  ::signal(SIGALRM, on_fatal);

  Gen g{seed};
  long long refused = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (long long k = 0; k < runs; ++k) {
    std::string d = seeds[g.below(seeds.size())];
    for (size_t m = 1 + g.below(6); m > 0; --m) mutate_once(d, seeds, g);
    {
      std::ofstream(g_input, std::ios::binary | std::ios::trunc).write(d.data(), std::streamsize(d.size()));
    }
    ::alarm(10);
    try {
      gmlp::fuzz::read_as(target, g_input);
    } catch (const gmlp::Error&) {
      ++refused;  // a clear refusal: what a malformed file should get
    } catch (const std::exception& e) {
      const std::string keep = (fs::path(work) / "finding").string();
      fs::copy_file(g_input, keep, fs::copy_options::overwrite_existing, ec);
      std::fprintf(stderr, "gmlp_mutate: FINDING: %s, run %lld of seed %llu: %s (not a gmlp::Error); input kept in %s\n",
                   target.c_str(), k, (unsigned long long)seed, e.what(), keep.c_str());
      return 1;
    }
    ::alarm(0);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("gmlp_mutate: %s: %lld runs from %zu seeds (seed %llu), %lld refused with an error, no finding; %.0f runs/s\n",
              target.c_str(), runs, seeds.size(), (unsigned long long)seed, refused, runs / std::max(s, 1e-9));
  fs::remove_all(work, ec);
  return 0;
}
