#pragma once
// Optional parts of gmlp built as modules of their own (libgmlp_cuda.so, libgmlp_mpi.so)
// and opened only when a run needs them, so that every other run neither maps their
// libraries (CUDA's, MPI's) nor needs them installed.
#include <initializer_list>
#include <string>

namespace gmlp {

// dlopen's handle of the first `file` found next to the object holding this code (the
// gmlp executable, or the Python extension in its installed package) or at
// `build_path` (where the build put it) that exports every one of `entries`; null, with
// `error` saying why, when none does.
void* open_module(const std::string& file, const std::string& build_path, std::initializer_list<const char*> entries,
                  std::string& error);

}  // namespace gmlp
