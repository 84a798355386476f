// The entry points of enzcc kernels by stable name, for the native handlers (tf_op.cc, xla_ffi.cc).
//
// A saved program (a TensorFlow SavedModel, a jax.export artifact) names the function it calls by the kernel's
// stable op name ("namespace::function") and the entry point ("primal", "vjp", "jvp_v4", ...), never by an
// address, which means nothing in another process. The Python side registers each entry point of each kernel it
// loads (enzyme(...) or load_library(path)) through enzcc_register_entry, exported from the handler's library;
// the handler finds the address here when it runs. A name not registered is an error telling the user to load
// the library, not a call through a stale address.

#ifndef ENZCC_PLUGINS_ENTRY_REGISTRY_H
#define ENZCC_PLUGINS_ENTRY_REGISTRY_H

#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace enzcc_registry {

inline std::shared_mutex &Mutex() {
  static std::shared_mutex m;
  return m;
}

inline std::unordered_map<std::string, void *> &Table() {
  static std::unordered_map<std::string, void *> t;
  return t;
}

inline std::string Key(std::string_view kernel, std::string_view entry) {
  std::string key(kernel);
  key.push_back('\0');
  key.append(entry);
  return key;
}

// The address registered for (kernel, entry), or nullptr.
inline void *Find(std::string_view kernel, std::string_view entry) {
  thread_local std::string key;
  key.assign(kernel);
  key.push_back('\0');
  key.append(entry);
  std::shared_lock<std::shared_mutex> lock(Mutex());
  auto it = Table().find(key);
  return it == Table().end() ? nullptr : it->second;
}

}  // namespace enzcc_registry

// 0: registered (or already registered at this address); 1: the name holds another address (another library
// under the same op name: the Python side reports the clash); 2: a null argument.
extern "C" __attribute__((visibility("default"))) int enzcc_register_entry(const char *kernel, const char *entry,
                                                                             void *fn) {
  if (kernel == nullptr || entry == nullptr || fn == nullptr) return 2;
  std::unique_lock<std::shared_mutex> lock(enzcc_registry::Mutex());
  auto [it, fresh] = enzcc_registry::Table().emplace(enzcc_registry::Key(kernel, entry), fn);
  return fresh || it->second == fn ? 0 : 1;
}

#endif
