// One generic TensorFlow op, EnzccCall, that calls an entry point of an enzcc-built kernel library
// (plugins/ABI.md: NAME_enzcc_primal / _vjp / _jvp / _vjp_jvp) with the buffers of its tensors.
//
// Compiled once per machine by enzcc_plugins.tensorflow (cached by TensorFlow version and this file's
// hash) and loaded with tf.load_op_library. Every kernel of every user function is this one op; what
// differs is in its attributes: Tin/Tout (the tensors' dtypes), `key` (read by the Python gradient and
// forward rules only) and `spec`, one string (TensorFlow converts every attribute on every eager call, and
// one string costs a third of what a dozen list attributes do) of whitespace-separated fields:
//
//   enzcc2 KERNEL ENTRY NAME NPTR NARGS
//   NIN   then per input:     ARGNAME RANK DIM...      (the shapes the layout was made for; names for errors)
//   NOUT  then per output:    RANK DIM...
//   NSCR  then per temporary: DTYPE RANK DIM...        (a reverse pass's primal outputs, private seed copies)
//   NPTR*NARGS triples KIND INDEX EXTRA                (what each pointer of the a, d, ta, td arrays is: Slot)
//   NINTS then the integer parameters' values          (passed as int64_t, ABI 3)
//   [batch B then NIN flags]                           (tf.vectorized_map only: B items, see below)
//   [checked OWNER then NPTR*NARGS pairs ITEMSIZE WHAT] (the checked mode only; OWNER and WHAT hex-encoded)
//
// The batch section (written by the op's pfor rule, plugins/tensorflow.py): the entry point runs B times, once
// per item; every output has a leading axis of B, an input one when its flag is 1 (item b's data at b times an
// item's size), else all items share it. The shapes above are one item's; temporaries are reused from item to
// item (zeroed or copied again for each), outputs to zero are zeroed once.
//
// The checked mode (plugins/guard.py): the call runs through the guard helper's enzcc_guarded_slots
// (plugins/guard.c, registered in entry_registry.h as ("enzcc::checked", "call")) on guarded copies of its
// buffers, each of its tensor's size, so an access outside one is an InvalidArgument error naming the parameter
// (WHAT: "output 'y' (shape (3,), float64)") and the element (ITEMSIZE) instead of heap corruption.
//
// KERNEL is the kernel's stable op name ("namespace::function") and ENTRY the entry point ("primal", "vjp",
// "jvp", "vjp_jvp"). When TensorFlow constructs the kernel (once per graph node / eager attribute set) it finds
// the entry point's address in entry_registry.h, where enzcc_plugins.tensorflow registers every kernel it loads
// (enzyme(...) or load_library(path)). So a SavedModel names its functions by something stable: in a fresh
// process it runs once the library is loaded, and before that it is an error saying so, never a call through a
// stale address. The Python side (plugins/tensorflow.py) writes the spec; this file knows nothing about
// gradients.

#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

#include "entry_registry.h"

namespace {

using tensorflow::DataType;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Status;
using tensorflow::Tensor;
using tensorflow::TensorShape;
namespace errors = tensorflow::errors;

// What one pointer of an entry point's argument arrays is.
enum Slot : int64_t {
  kNull = 0,         // NULL
  kInput = 1,        // the data of input INDEX (read only by contract)
  kOutput = 2,       // the data of output INDEX, written by the function
  kOutputZero = 3,   // the data of output INDEX, zero-filled first (accumulated gradients)
  kScratch = 4,      // temporary INDEX, uninitialized
  kScratchZero = 5,  // temporary INDEX, zero-filled
  kScratchCopy = 6,  // temporary INDEX, a private copy of input EXTRA (seeds, which are consumed)
  kInt = 7,          // the address of the int64_t value of integer INDEX
};

using Entry1 = void (*)(void *const *);
using Entry2 = void (*)(void *const *, void *const *);
using Entry4 = void (*)(void *const *, void *const *, void *const *, void *const *);

// The parsed `spec` attribute.
struct Spec {
  std::string kernel, entry, name;
  int64_t nptr = 0, nargs = 0;
  std::vector<std::string> in_names;
  std::vector<TensorShape> in_shapes, out_shapes, scratch_shapes;
  std::vector<DataType> scratch_types;
  std::vector<int64_t> layout, ints;
  int64_t batch = -1;            // the batch section: B (-1: none)
  std::vector<int64_t> batched;  // per input: 1 when it has the leading axis of B
  bool checked = false;  // the checked mode: what each pointer is, for its messages
  std::string owner;
  std::vector<std::string> what;
  std::vector<int32_t> itemsize;
};

// Text written as hexadecimal bytes (names and descriptions hold spaces, and the spec splits on them).
bool Unhex(const std::string &hex, std::string *out) {
  if (hex.size() % 2) return false;
  out->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    int v = 0;
    for (size_t k = i; k < i + 2; ++k) {
      const char c = hex[k];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return false;
      v = v * 16 + d;
    }
    out->push_back(static_cast<char>(v));
  }
  return true;
}

class Reader {
 public:
  explicit Reader(const std::string &text) : in_(text) {}
  bool Word(std::string *w) { return static_cast<bool>(in_ >> *w); }
  bool Int(int64_t *v) { return static_cast<bool>(in_ >> *v); }
  bool Count(size_t *n) {  // a non-negative count small enough to allocate
    int64_t v;
    if (!Int(&v) || v < 0 || v > (1 << 20)) return false;
    *n = static_cast<size_t>(v);
    return true;
  }
  bool Shape(TensorShape *s) {
    size_t rank;
    if (!Count(&rank) || rank > 64) return false;
    std::vector<int64_t> dims(rank);
    for (auto &d : dims) {
      if (!Int(&d) || d < 0) return false;
    }
    return TensorShape::BuildTensorShape(dims, s).ok();
  }
  bool AtEnd() {
    std::string rest;
    return !(in_ >> rest);
  }

 private:
  std::istringstream in_;
};

Status ParseSpec(const std::string &text, Spec *s) {
  Reader r(text);
  std::string magic;
  size_t n;
  auto bad = [&](const char *what) { return errors::InvalidArgument("EnzccCall: malformed spec (", what, ")"); };
  if (!r.Word(&magic) || magic != "enzcc2") return bad("version");
  if (!r.Word(&s->kernel) || !r.Word(&s->entry) || !r.Word(&s->name) || !r.Int(&s->nptr) || !r.Int(&s->nargs))
    return bad("header");
  if (!(s->nptr == 1 || s->nptr == 2 || s->nptr == 4) || s->nargs < 0 || s->nargs > (1 << 16)) return bad("arity");
  if (!r.Count(&n)) return bad("inputs");
  s->in_names.resize(n);
  s->in_shapes.resize(n);
  for (size_t i = 0; i < n; i++) {
    if (!r.Word(&s->in_names[i]) || !r.Shape(&s->in_shapes[i])) return bad("input shape");
  }
  if (!r.Count(&n)) return bad("outputs");
  s->out_shapes.resize(n);
  for (auto &sh : s->out_shapes) {
    if (!r.Shape(&sh)) return bad("output shape");
  }
  if (!r.Count(&n)) return bad("temporaries");
  s->scratch_types.resize(n);
  s->scratch_shapes.resize(n);
  for (size_t i = 0; i < n; i++) {
    int64_t t;
    if (!r.Int(&t) || !tensorflow::DataType_IsValid(static_cast<int>(t)) || !r.Shape(&s->scratch_shapes[i]))
      return bad("temporary");
    s->scratch_types[i] = static_cast<DataType>(t);
  }
  s->layout.resize(static_cast<size_t>(3 * s->nptr * s->nargs));
  for (auto &v : s->layout) {
    if (!r.Int(&v)) return bad("layout");
  }
  if (!r.Count(&n)) return bad("integers");
  s->ints.resize(n);
  for (auto &v : s->ints) {
    if (!r.Int(&v)) return bad("integer");
  }
  std::string word, hex;
  bool more = r.Word(&word);
  if (more && word == "batch") {  // tf.vectorized_map's batch section
    if (!r.Int(&s->batch) || s->batch < 0 || !r.Count(&n) || n != s->in_shapes.size()) return bad("batch");
    s->batched.resize(n);
    for (auto &v : s->batched) {
      if (!r.Int(&v) || (v != 0 && v != 1)) return bad("batch flag");
    }
    more = r.Word(&word);
  }
  if (more) {  // the checked mode's section
    if (word != "checked" || !r.Word(&hex) || !Unhex(hex, &s->owner)) return bad("trailing fields");
    s->checked = true;
    s->what.resize(static_cast<size_t>(s->nptr * s->nargs));
    s->itemsize.resize(s->what.size());
    for (size_t k = 0; k < s->what.size(); k++) {
      int64_t item;
      if (!r.Int(&item) || item < 1 || item > 64 || !r.Word(&hex) || !Unhex(hex, &s->what[k]))
        return bad("checked slot");
      s->itemsize[k] = static_cast<int32_t>(item);
    }
  }
  if (!r.AtEnd()) return bad("trailing fields");
  return Status();
}

// plugins/guard.c's enzcc_guarded_slots: fn on guarded copies of its buffers; 0, or a message in msg
using GuardedSlots = int (*)(void *fn, int nargs, int64_t P, void *const *addr, const int64_t *nbytes,
                             const int32_t *writable, const int32_t *itemsize, const char *const *what,
                             const char *owner, char *msg, size_t cap);

class EnzccCallOp : public OpKernel {
 public:
  explicit EnzccCallOp(OpKernelConstruction *ctx) : OpKernel(ctx) {
    std::string text;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("spec", &text));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("Tin", &tin_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("Tout", &tout_));
    OP_REQUIRES_OK(ctx, ParseSpec(text, &s_));
    OP_REQUIRES(ctx, s_.in_shapes.size() == tin_.size() && s_.out_shapes.size() == tout_.size(),
                errors::InvalidArgument("EnzccCall: the spec has ", s_.in_shapes.size(), " inputs and ",
                                        s_.out_shapes.size(), " outputs, Tin/Tout ", tin_.size(), " and ",
                                        tout_.size()));
    // every layout entry in bounds, copies between tensors of the same type and size
    for (size_t k = 0; k < s_.layout.size(); k += 3) {
      const int64_t kind = s_.layout[k], index = s_.layout[k + 1], extra = s_.layout[k + 2];
      auto in_range = [](int64_t i, size_t n) { return i >= 0 && static_cast<size_t>(i) < n; };
      bool ok = true;
      switch (kind) {
        case kNull: break;
        case kInput: ok = in_range(index, tin_.size()); break;
        case kOutput:
        case kOutputZero: ok = in_range(index, tout_.size()); break;
        case kScratch:
        case kScratchZero: ok = in_range(index, s_.scratch_types.size()); break;
        case kScratchCopy:
          ok = in_range(index, s_.scratch_types.size()) && in_range(extra, tin_.size()) &&
               s_.scratch_types[index] == tin_[extra] && s_.scratch_shapes[index] == s_.in_shapes[extra];
          break;
        case kInt: ok = in_range(index, s_.ints.size()); break;
        default: ok = false;
      }
      OP_REQUIRES(ctx, ok,
                  errors::InvalidArgument("EnzccCall: bad layout entry ", k / 3, ": (", kind, ", ", index, ", ",
                                          extra, ")"));
    }
    // the entry point by the kernel's stable name, registered when its library was loaded
    fn_ = enzcc_registry::Find(s_.kernel, s_.entry);
    OP_REQUIRES(ctx, fn_ != nullptr,
                errors::FailedPrecondition("the enzcc op ", s_.kernel, " (entry point ", s_.entry,
                                           ") is not loaded in this process; call "
                                           "enzcc_plugins.tensorflow.load_library(path) with the library saved "
                                           "by save_library(...), or make the op again with "
                                           "enzcc_plugins.tensorflow.enzyme(...)"));
    if (s_.checked) {
      guarded_ = reinterpret_cast<GuardedSlots>(enzcc_registry::Find("enzcc::checked", "call"));
      OP_REQUIRES(ctx, guarded_ != nullptr,
                  errors::FailedPrecondition("EnzccCall: the checked mode's helper is not loaded in this process "
                                             "(enzcc_plugins.guard registers it)"));
    }
  }

  void Compute(OpKernelContext *ctx) override {
    const bool batch = s_.batch >= 0;
    const int64_t B = batch ? s_.batch : 1;
    const int nin = ctx->num_inputs();
    std::vector<char *> in_base(nin);
    std::vector<size_t> in_stride(nin, 0), in_item(nin);  // bytes between items (0: shared), of one item
    for (int i = 0; i < nin; i++) {
      TensorShape want = s_.in_shapes[i];
      if (batch && s_.batched[i]) want.InsertDim(0, B);
      const Tensor &t = ctx->input(i);
      OP_REQUIRES(ctx, t.shape() == want,
                  errors::InvalidArgument(s_.name, ": argument '", s_.in_names[i], "' has shape ",
                                          t.shape().DebugString(), ", but the op was made for shape ",
                                          want.DebugString()));
      in_base[i] = static_cast<char *>(Data(t));
      in_item[i] = t.tensor_data().size() / (batch && s_.batched[i] ? (B ? B : 1) : 1);
      in_stride[i] = batch && s_.batched[i] ? in_item[i] : 0;
    }
    std::vector<Tensor *> outputs(tout_.size(), nullptr);
    std::vector<size_t> out_item(tout_.size());
    for (size_t j = 0; j < tout_.size(); j++) {
      TensorShape shape = s_.out_shapes[j];
      if (batch) shape.InsertDim(0, B);
      OP_REQUIRES_OK(ctx, ctx->allocate_output(static_cast<int>(j), shape, &outputs[j]));
      out_item[j] = outputs[j]->tensor_data().size() / (B ? B : 1);
    }
    std::vector<Tensor> scratch(s_.scratch_types.size());
    for (size_t j = 0; j < scratch.size(); j++) {
      OP_REQUIRES_OK(ctx, ctx->allocate_temp(s_.scratch_types[j], s_.scratch_shapes[j], &scratch[j]));
    }
    for (size_t k = 0; k < s_.layout.size(); k += 3)  // accumulated outputs: zeroed once, for every item
      if (s_.layout[k] == kOutputZero) Zeroed(outputs[s_.layout[k + 1]]);
    std::vector<void *> ptrs(static_cast<size_t>(s_.nptr * s_.nargs), nullptr);
    std::vector<int64_t> nbytes(ptrs.size(), -1);  // (the checked mode: each pointer's buffer size)
    for (int64_t b = 0; b < B; b++) {
      for (size_t k = 0; k < ptrs.size(); k++) {
        const int64_t kind = s_.layout[3 * k], index = s_.layout[3 * k + 1], extra = s_.layout[3 * k + 2];
        switch (kind) {
          case kNull: break;
          case kInput:
            ptrs[k] = in_base[index] + b * in_stride[index];
            nbytes[k] = static_cast<int64_t>(in_item[index]);
            break;
          case kOutput:
          case kOutputZero:
            ptrs[k] = static_cast<char *>(Data(*outputs[index])) + b * out_item[index];
            nbytes[k] = static_cast<int64_t>(out_item[index]);
            break;
          case kScratch: ptrs[k] = Data(scratch[index]); break;
          case kScratchZero: ptrs[k] = Zeroed(&scratch[index]); break;
          case kScratchCopy:
            ptrs[k] = CopyOf(&scratch[index], in_base[extra] + b * in_stride[extra]);
            break;
          case kInt: ptrs[k] = const_cast<int64_t *>(&s_.ints[index]); nbytes[k] = 8; break;  // read only
        }
        if (kind == kScratch || kind == kScratchZero || kind == kScratchCopy)
          nbytes[k] = static_cast<int64_t>(scratch[index].tensor_data().size());
      }
      void *const *p = ptrs.data();
      const size_t n = static_cast<size_t>(s_.nargs);
      if (s_.checked) {
        CheckedCall(ctx, p, nbytes);
        if (!ctx->status().ok()) return;
        continue;
      }
      switch (s_.nptr) {
        case 1: reinterpret_cast<Entry1>(fn_)(p); break;
        case 2: reinterpret_cast<Entry2>(fn_)(p, p + n); break;
        case 4: reinterpret_cast<Entry4>(fn_)(p, p + n, p + 2 * n, p + 3 * n); break;
      }
    }
  }

 private:
  // TensorFlow's CPU tensors are dense and row-major; tensor_data() is the whole buffer
  static void *Data(const Tensor &t) { return const_cast<char *>(t.tensor_data().data()); }
  static void *Zeroed(Tensor *t) {
    auto d = t->tensor_data();
    if (d.size() != 0) std::memset(const_cast<char *>(d.data()), 0, d.size());
    return const_cast<char *>(d.data());
  }
  static void *CopyOf(Tensor *dst, const char *src) {  // (src: an item of a tensor of dst's type and shape)
    auto d = dst->tensor_data();
    if (d.size() != 0) std::memcpy(const_cast<char *>(d.data()), src, d.size());
    return const_cast<char *>(d.data());
  }

  // The checked mode's call (one item's): each pointer's buffer of nbytes (-1: none), writable when an output or
  // a temporary; an access outside one is an InvalidArgument error with guard.c's message
  void CheckedCall(OpKernelContext *ctx, void *const *p, const std::vector<int64_t> &nbytes) {
    const size_t m = nbytes.size();
    std::vector<int32_t> writable(m, 0);
    std::vector<const char *> what(m);
    for (size_t k = 0; k < m; k++) {
      const int64_t kind = s_.layout[3 * k];
      what[k] = s_.what[k].c_str();
      writable[k] = kind != kInput && kind != kInt;
    }
    char msg[1024];
    const int rc = guarded_(fn_, static_cast<int>(s_.nptr), s_.nargs, p, nbytes.data(), writable.data(),
                            s_.itemsize.data(), what.data(), s_.owner.c_str(), msg, sizeof msg);
    OP_REQUIRES(ctx, rc == 0, errors::InvalidArgument(msg));
  }

  Spec s_;
  std::vector<DataType> tin_, tout_;
  void *fn_ = nullptr;
  GuardedSlots guarded_ = nullptr;
};

}  // namespace

REGISTER_OP("EnzccCall")
    .Input("inputs: Tin")
    .Output("outputs: Tout")
    .Attr("Tin: list(type) >= 0")
    .Attr("Tout: list(type) >= 0")
    .Attr("spec: string")
    .Attr("key: string")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext *c) {
      std::string text;
      Spec s;
      TF_RETURN_IF_ERROR(c->GetAttr("spec", &text));
      TF_RETURN_IF_ERROR(ParseSpec(text, &s));
      if (static_cast<int>(s.out_shapes.size()) != c->num_outputs())
        return errors::InvalidArgument("EnzccCall: the spec has ", s.out_shapes.size(), " outputs, Tout ",
                                       c->num_outputs());
      for (size_t j = 0; j < s.out_shapes.size(); j++) {
        tensorflow::shape_inference::ShapeHandle h;
        TensorShape shape = s.out_shapes[j];
        if (s.batch >= 0) shape.InsertDim(0, s.batch);
        TF_RETURN_IF_ERROR(c->MakeShapeFromTensorShape(shape, &h));
        c->set_output(static_cast<int>(j), h);
      }
      return Status();
    })
    .Doc(R"doc(
Calls an entry point of an enzcc-built kernel library (plugins/ABI.md) with the tensors' buffers, as
`spec` describes. `key` names the kernel and entry point for enzcc_plugins.tensorflow's derivative rules.
)doc");

REGISTER_KERNEL_BUILDER(Name("EnzccCall").Device(tensorflow::DEVICE_CPU), EnzccCallOp);
