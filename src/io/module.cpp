// Finding and opening gmlp's modules (module.h).
#include "io/module.h"

#include <dlfcn.h>

#include <vector>

namespace gmlp {

void* open_module(const std::string& file, const std::string& build_path, std::initializer_list<const char*> entries,
                  std::string& error) {
  std::vector<std::string> candidates;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&open_module), &info) && info.dli_fname) {
    const std::string self = info.dli_fname;
    const size_t slash = self.rfind('/');
    candidates.push_back((slash == std::string::npos ? std::string(".") : self.substr(0, slash)) + "/" + file);
  }
  candidates.push_back(build_path);
  error.clear();
  for (const std::string& path : candidates) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      if (error.empty()) error = dlerror();
      continue;
    }
    const char* missing = nullptr;
    for (const char* e : entries)
      if (!missing && !dlsym(h, e)) missing = e;
    if (!missing) return h;
    error = path + ": not this gmlp's module (no " + missing + ")";
    dlclose(h);
  }
  return nullptr;
}

}  // namespace gmlp
