// One generic XLA FFI handler ("enzcc_call") through which enzcc_plugins.jax calls every kernel that
// enzcc_plugins.build compiles (plugins/ABI.md): NAME_enzcc_primal(a), NAME_enzcc_vjp(a, d),
// NAME_enzcc_jvp(a, d) and NAME_enzcc_vjp_jvp(a, d, ta, td).
//
// The handler knows nothing about a kernel but what its attributes say:
//   kernel      the kernel's stable op name ("namespace::function") and the entry point ("primal", "vjp",
//   entry       "jvp", "vjp_jvp", "jvp_jvp"): the handler finds the address in entry_registry.h, where
//               enzcc_plugins.jax registers every entry point of every kernel it loads (enzyme(...) or
//               load_library(path)). A serialized jax.export therefore runs in any process that has loaded the
//               library; one that has not gets an error saying so, never a call through a stale address.
//   arrays      how many pointer arrays the entry point takes: 1 (a), 2 (a, d) or 4 (a, d, ta, td)
//   slot_kind   arrays * P entries (P = the C function's parameter count), array by array, each saying where
//   slot_index  that pointer comes from: 0 NULL, 1 operand slot_index, 2 result slot_index,
//               3 the address of ints[slot_index], 4 scratch buffer slot_index
//   scratch     the byte size of each scratch buffer: memory the entry point writes and nobody reads (the primal
//               outputs of the derivative entry points). It is the handler's own, per thread, reused from call
//               to call and from batch item to batch item, where XLA results would be fresh memory (page
//               faults) on every call
//   ints        the integer parameters' values (ABI 3 passes every integer as an int64_t)
//   zero        results set to zero before the call (gradients are accumulated with +=)
//   batch       B: the call runs B times (jax.vmap); every result has a leading axis of B, an operand has one
//               when batched[operand] is 1 (item b then starts at byte b * size / B), else all items share it
//   batched     one flag per operand
//   ventry      for the forward, reverse or forward-over-reverse entry point under jax.vmap: the name of its
//               vector-mode versions (entry + "_v2", "_v4", "_v8", registered as above; empty: none).
//               When every pointer of the first array (the primal arguments) is the same for all
//               batch items, W items at a time run as one call whose second array (with 4 arrays: third and
//               fourth) holds W arrays of P pointers, item after item (plugins/ABI.md), each lane with its own
//               scratch; with 4 arrays the second is the first item's, whose seeds the caller guarantees the
//               same for all items, and the gradients written there are copied to the others. The items left
//               over run one by one
//
// Seeds (the cotangents of outputs, which the vjp entry consumes) arrive as results aliased to operands
// (XLA's input/output aliasing copies them when the caller still needs them), so no operand is ever written.
//
// The checked mode (plugins/guard.py) is a second target, "enzcc_call_checked" (EnzccCallChecked): the same
// attributes and two more, owner (the function's name) and describe (one line per slot: the element size, a tab,
// what the buffer is, in the declaration's terms). Each batch item's call then runs through the guard helper's
// enzcc_guarded_slots (plugins/guard.c, registered in entry_registry.h as ("enzcc::checked", "call")) on guarded
// copies of its buffers, each of the size XLA gives it (per item), so an access outside one is an error naming
// the parameter and element instead of heap corruption. No vector mode there: one item per call.
//
// Built by enzcc_plugins.jax with clang++ -std=c++17 against jax.ffi.include_dir(); see handler_library().

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "xla/ffi/api/ffi.h"
#include "entry_registry.h"

namespace ffi = xla::ffi;

namespace {

using Entry1 = void (*)(void *const *);
using Entry2 = void (*)(void *const *, void *const *);
using Entry4 = void (*)(void *const *, void *const *, void *const *, void *const *);

enum SlotKind : int64_t { kNull = 0, kOperand = 1, kResult = 2, kInt = 3, kScratch = 4 };

// Scratch memory: the calling thread's, grown as needed and kept for the next calls, up to kKeep bytes; a
// larger request gets memory of its own, freed when the call returns.
constexpr size_t kKeep = size_t{256} << 20;
constexpr size_t kAlign = 64;

struct FreeDeleter {
  void operator()(char *p) const { std::free(p); }
};
using Memory = std::unique_ptr<char, FreeDeleter>;

char *AllocateScratch(size_t bytes, Memory &own) {
  bytes = (bytes + kAlign - 1) / kAlign * kAlign;
  if (bytes == 0) bytes = kAlign;
  thread_local Memory kept;
  thread_local size_t kept_bytes = 0;
  if (bytes <= kept_bytes) return kept.get();
  Memory fresh(static_cast<char *>(std::aligned_alloc(kAlign, bytes)));
  if (!fresh) return nullptr;
  if (bytes > kKeep) {
    own = std::move(fresh);
    return own.get();
  }
  kept = std::move(fresh);
  kept_bytes = bytes;
  return kept.get();
}

// The registered address of (kernel, entry), or an error telling the user to load the kernel's library.
ffi::Error FindEntry(std::string_view kernel, std::string_view entry, void **fn) {
  *fn = enzcc_registry::Find(kernel, entry);
  if (*fn == nullptr)
    return ffi::Error::InvalidArgument(
        "enzcc_call: the enzcc op " + std::string(kernel) + " (entry point " + std::string(entry) +
        ") is not loaded in this process; call enzcc_plugins.jax.load_library(path) with the library saved by "
        "save_library(...), or make the op again with enzcc_plugins.jax.enzyme(...)");
  return ffi::Error::Success();
}

// n elements, on the stack when few (the common case: no allocation per call), else on the heap
template <class T, size_t N = 32>
class Scratch {
 public:
  explicit Scratch(size_t n) : heap_(n > N ? n : 0), data_(n > N ? heap_.data() : stack_) {}
  T &operator[](size_t i) { return data_[i]; }
  T *data() { return data_; }

 private:
  T stack_[N];
  std::vector<T> heap_;
  T *data_;
};

struct Region {
  char *base;
  size_t stride;  // bytes between batch items; 0: shared by all items
  size_t bytes;   // the whole buffer's size
};

// plugins/guard.c's enzcc_guarded_slots: fn on guarded copies of its buffers; 0, or a message in msg
using GuardedSlots = int (*)(void *fn, int nargs, int64_t P, void *const *addr, const int64_t *nbytes,
                             const int32_t *writable, const int32_t *itemsize, const char *const *what,
                             const char *owner, char *msg, size_t cap);

// The checked mode's state of one call: the guard helper and what each slot is (the describe attribute)
struct Checked {
  GuardedSlots call = nullptr;
  std::string owner;
  std::vector<std::string> what;
  std::vector<int32_t> itemsize;
};

ffi::Error ParseChecked(std::string_view owner, std::string_view describe, size_t slots, Checked *c) {
  c->call = reinterpret_cast<GuardedSlots>(enzcc_registry::Find("enzcc::checked", "call"));
  if (c->call == nullptr)
    return ffi::Error::InvalidArgument("enzcc_call_checked: the checked mode's helper is not loaded in this "
                                       "process (enzcc_plugins.guard registers it)");
  c->owner.assign(owner);
  while (!describe.empty()) {
    size_t end = describe.find('\n');
    std::string_view line = describe.substr(0, end);
    size_t tab = line.find('\t');
    if (tab == std::string_view::npos) return ffi::Error::InvalidArgument("enzcc_call_checked: bad describe");
    c->itemsize.push_back(static_cast<int32_t>(std::atoi(std::string(line.substr(0, tab)).c_str())));
    c->what.emplace_back(line.substr(tab + 1));
    if (end == std::string_view::npos) break;
    describe.remove_prefix(end + 1);
  }
  if (c->what.size() != slots)
    return ffi::Error::InvalidArgument("enzcc_call_checked: describe has " + std::to_string(c->what.size()) +
                                       " lines for " + std::to_string(slots) + " slots");
  return ffi::Error::Success();
}

// One batch item's call in the checked mode: each slot's size (an operand's per item, or whole when shared; a
// result's per item; 8 bytes for an integer; a scratch buffer's), writable when a result or scratch
ffi::Error CheckedItem(const Checked &c, void *fn, int64_t arrays, size_t P, void *const *p,
                       ffi::Span<const int64_t> slot_kind, ffi::Span<const int64_t> slot_index, const Region *in,
                       const Region *out, ffi::Span<const int64_t> scratch) {
  const size_t n = slot_kind.size();
  std::vector<int64_t> nbytes(n, -1);
  std::vector<int32_t> writable(n, 0);
  std::vector<const char *> what(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t idx = slot_index[i];
    what[i] = c.what[i].c_str();
    switch (slot_kind[i]) {
      case kOperand: nbytes[i] = static_cast<int64_t>(in[idx].stride ? in[idx].stride : in[idx].bytes); break;
      case kResult: nbytes[i] = static_cast<int64_t>(out[idx].stride); writable[i] = 1; break;
      case kInt: nbytes[i] = 8; break;
      case kScratch: nbytes[i] = scratch[idx]; writable[i] = 1; break;
      default: break;
    }
  }
  char msg[1024];
  int rc = c.call(fn, static_cast<int>(arrays), static_cast<int64_t>(P), p, nbytes.data(), writable.data(),
                  c.itemsize.data(), what.data(), c.owner.c_str(), msg, sizeof msg);
  if (rc != 0) return ffi::Error::InvalidArgument(msg);
  return ffi::Error::Success();
}

// The call (checked: nullptr, or the checked mode's state)
ffi::Error CallImpl(ffi::RemainingArgs args, ffi::RemainingRets rets, std::string_view kernel,
                    std::string_view entry, int64_t arrays,
                    ffi::Span<const int64_t> slot_kind, ffi::Span<const int64_t> slot_index,
                    ffi::Span<const int64_t> ints, ffi::Span<const int64_t> zero, int64_t batch,
                    ffi::Span<const int64_t> batched, ffi::Span<const int64_t> scratch,
                    std::string_view ventry, const Checked *checked) {
  void *fn = nullptr;
  if (ffi::Error e = FindEntry(kernel, entry, &fn); e.failure()) return e;
  constexpr size_t kWidths[] = {2, 4, 8};
  void *vfn[3] = {nullptr, nullptr, nullptr};
  if (!ventry.empty() && arrays != 2 && arrays != 4)
    return ffi::Error::InvalidArgument("enzcc_call: ventry needs an entry point taking 2 or 4 arrays");
  for (size_t v = 0; !ventry.empty() && v < 3; ++v) {
    if (ffi::Error e = FindEntry(kernel, std::string(ventry) + "_v" + std::to_string(kWidths[v]), &vfn[v]);
        e.failure())
      return e;
  }
  const bool has_vector = !ventry.empty();
  if (arrays != 1 && arrays != 2 && arrays != 4)
    return ffi::Error::InvalidArgument("enzcc_call: arrays must be 1, 2 or 4");
  if (slot_kind.size() != slot_index.size() || slot_kind.size() % arrays != 0)
    return ffi::Error::InvalidArgument("enzcc_call: slot_kind and slot_index disagree");
  if (batch < 0) return ffi::Error::InvalidArgument("enzcc_call: negative batch");
  if (batch == 0) return ffi::Error::Success();  // jax.vmap over an empty axis: every result is empty
  if (batched.size() != args.size())
    return ffi::Error::InvalidArgument("enzcc_call: one batched flag per operand expected");
  const size_t B = static_cast<size_t>(batch);

  Scratch<Region> in(args.size()), out(rets.size());
  for (size_t j = 0; j < args.size(); ++j) {
    auto buf = args.get<ffi::AnyBuffer>(j);
    if (buf.has_error()) return buf.error();
    size_t bytes = buf->size_bytes();
    if (batched[j] && bytes % B) return ffi::Error::InvalidArgument("enzcc_call: operand not divisible by batch");
    in[j] = {static_cast<char *>(buf->untyped_data()), batched[j] ? bytes / B : 0, bytes};
  }
  for (size_t k = 0; k < rets.size(); ++k) {
    auto buf = rets.get<ffi::AnyBuffer>(k);
    if (buf.has_error()) return buf.error();
    size_t bytes = (*buf)->size_bytes();
    if (bytes % B) return ffi::Error::InvalidArgument("enzcc_call: result not divisible by batch");
    out[k] = {static_cast<char *>((*buf)->untyped_data()), bytes / B, bytes};
  }
  for (int64_t k : zero) {
    if (k < 0 || static_cast<size_t>(k) >= rets.size())
      return ffi::Error::InvalidArgument("enzcc_call: zero names no result");
    std::memset(out[k].base, 0, out[k].stride * B);
  }
  Scratch<int64_t> cells(ints.size());  // writable, 8-byte aligned copies
  std::copy(ints.begin(), ints.end(), cells.data());

  // the scratch buffers, one after the other in this thread's scratch memory; every batch item reuses them (in
  // vector mode, each of the at most 8 lanes of a run has its own)
  Scratch<size_t> scratch_at(scratch.size());
  size_t scratch_bytes = 0;
  for (size_t k = 0; k < scratch.size(); ++k) {
    if (scratch[k] < 0) return ffi::Error::InvalidArgument("enzcc_call: negative scratch size");
    scratch_at[k] = scratch_bytes;
    scratch_bytes += (static_cast<size_t>(scratch[k]) + kAlign - 1) / kAlign * kAlign;
  }
  const size_t scratch_lanes = has_vector ? 8 : 1;
  Memory own_scratch;
  char *scratch_base = scratch.size() ? AllocateScratch(scratch_bytes * scratch_lanes, own_scratch) : nullptr;
  if (scratch.size() && scratch_base == nullptr)
    return ffi::Error(ffi::ErrorCode::kResourceExhausted, "enzcc_call: cannot allocate scratch memory");

  const size_t n = slot_kind.size();
  for (size_t i = 0; i < n; ++i) {
    int64_t idx = slot_index[i];
    bool ok = true;
    switch (slot_kind[i]) {
      case kNull: break;
      case kOperand: ok = idx >= 0 && static_cast<size_t>(idx) < args.size(); break;
      case kResult: ok = idx >= 0 && static_cast<size_t>(idx) < rets.size(); break;
      case kInt: ok = idx >= 0 && static_cast<size_t>(idx) < ints.size(); break;
      case kScratch: ok = idx >= 0 && static_cast<size_t>(idx) < scratch.size(); break;
      default: ok = false;
    }
    if (!ok) return ffi::Error::InvalidArgument("enzcc_call: bad slot " + std::to_string(i));
  }

  // the pointer slot i stands for in batch item b (lane: which scratch copy, in vector mode)
  auto pointer = [&](size_t i, size_t b, size_t lane = 0) -> void * {
    int64_t idx = slot_index[i];
    switch (slot_kind[i]) {
      case kOperand: return in[idx].base + b * in[idx].stride;
      case kResult: return out[idx].base + b * out[idx].stride;
      case kInt: return &cells[idx];
      case kScratch: return scratch_base + lane * scratch_bytes + scratch_at[idx];
      default: return nullptr;
    }
  };
  const size_t P = n / arrays;
  // vector mode: the primal arguments (first array) must be shared by all items. With 4 arrays (forward over
  // reverse), the second array (gradients and seeds, the VJP's own arguments) is item b's for the whole run (the
  // caller passes seeds shared by the items, as copies), and the gradients written there are copied to the
  // other lanes' items; the third and fourth arrays are per lane
  bool shared = has_vector && checked == nullptr;
  for (size_t i = 0; shared && i < P; ++i)
    shared = slot_kind[i] != kResult && (slot_kind[i] != kOperand || in[slot_index[i]].stride == 0);
  size_t b = 0;
  if (shared) {
    const size_t lane_arrays = arrays == 4 ? 2 : 1;
    Scratch<void *, 256> vptrs(2 * P + 2 * 8 * P);
    void **lane_base[2] = {vptrs.data() + (arrays == 4 ? 2 * P : P), vptrs.data() + (arrays == 4 ? 2 * P : P) + 8 * P};
    for (size_t i = 0; i < P; ++i) vptrs[i] = pointer(i, 0);  // the primal arguments, once
    for (size_t v = 3; v-- > 0;) {
      const size_t W = kWidths[v];
      for (; b + W <= B; b += W) {
        if (arrays == 4)
          for (size_t i = 0; i < P; ++i) vptrs[P + i] = pointer(P + i, b);
        for (size_t r = 0; r < lane_arrays; ++r) {
          const size_t first = (arrays == 4 ? 2 + r : 1) * P;  // the slots of this per-lane array
          for (size_t k = 0; k < W; ++k)  // lane k: item b + k's array
            for (size_t i = 0; i < P; ++i) lane_base[r][k * P + i] = pointer(first + i, b + k, k);
        }
        if (arrays == 2) {
          reinterpret_cast<Entry2>(vfn[v])(vptrs.data(), lane_base[0]);
        } else {
          reinterpret_cast<Entry4>(vfn[v])(vptrs.data(), vptrs.data() + P, lane_base[0], lane_base[1]);
          for (size_t i = P; i < 2 * P; ++i)
            if (slot_kind[i] == kResult) {
              const Region &r = out[slot_index[i]];
              for (size_t k = 1; k < W; ++k) std::memcpy(r.base + (b + k) * r.stride, r.base + b * r.stride, r.stride);
            }
        }
      }
    }
  }
  Scratch<void *, 128> ptrs(n);
  for (; b < B; ++b) {
    for (size_t i = 0; i < n; ++i) ptrs[i] = pointer(i, b);
    void *const *p = ptrs.data();
    if (checked != nullptr) {
      if (ffi::Error e = CheckedItem(*checked, fn, arrays, P, p, slot_kind, slot_index, in.data(), out.data(),
                                     scratch);
          e.failure())
        return e;
      continue;
    }
    if (arrays == 1)
      reinterpret_cast<Entry1>(fn)(p);
    else if (arrays == 2)
      reinterpret_cast<Entry2>(fn)(p, p + P);
    else
      reinterpret_cast<Entry4>(fn)(p, p + P, p + 2 * P, p + 3 * P);
  }
  return ffi::Error::Success();
}

ffi::Error EnzccCallImpl(ffi::RemainingArgs args, ffi::RemainingRets rets, std::string_view kernel,
                         std::string_view entry, int64_t arrays,
                         ffi::Span<const int64_t> slot_kind, ffi::Span<const int64_t> slot_index,
                         ffi::Span<const int64_t> ints, ffi::Span<const int64_t> zero, int64_t batch,
                         ffi::Span<const int64_t> batched, ffi::Span<const int64_t> scratch,
                         std::string_view ventry) {
  return CallImpl(args, rets, kernel, entry, arrays, slot_kind, slot_index, ints, zero, batch, batched, scratch,
                  ventry, nullptr);
}

// The checked mode's target: the same call, each item on guarded copies of its buffers
ffi::Error EnzccCallCheckedImpl(ffi::RemainingArgs args, ffi::RemainingRets rets, std::string_view kernel,
                                std::string_view entry, int64_t arrays, ffi::Span<const int64_t> slot_kind,
                                ffi::Span<const int64_t> slot_index, ffi::Span<const int64_t> ints,
                                ffi::Span<const int64_t> zero, int64_t batch, ffi::Span<const int64_t> batched,
                                ffi::Span<const int64_t> scratch, std::string_view ventry, std::string_view owner,
                                std::string_view describe) {
  Checked c;
  if (ffi::Error e = ParseChecked(owner, describe, slot_kind.size(), &c); e.failure()) return e;
  return CallImpl(args, rets, kernel, entry, arrays, slot_kind, slot_index, ints, zero, batch, batched, scratch,
                  ventry, &c);
}

// The attributes both targets take (enzcc_call_checked adds owner and describe after them)
auto CallBinding() {
  return ffi::Ffi::Bind()
      .RemainingArgs()
      .RemainingRets()
      .Attr<std::string_view>("kernel")
      .Attr<std::string_view>("entry")
      .Attr<int64_t>("arrays")
      .Attr<ffi::Span<const int64_t>>("slot_kind")
      .Attr<ffi::Span<const int64_t>>("slot_index")
      .Attr<ffi::Span<const int64_t>>("ints")
      .Attr<ffi::Span<const int64_t>>("zero")
      .Attr<int64_t>("batch")
      .Attr<ffi::Span<const int64_t>>("batched")
      .Attr<ffi::Span<const int64_t>>("scratch")
      .Attr<std::string_view>("ventry");
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(EnzccCall, EnzccCallImpl, CallBinding());

XLA_FFI_DEFINE_HANDLER_SYMBOL(EnzccCallChecked, EnzccCallCheckedImpl,
                              CallBinding().Attr<std::string_view>("owner").Attr<std::string_view>("describe"));
