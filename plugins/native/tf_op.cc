// One generic TensorFlow op, EnzccCall, that calls an entry point of an enzcc-built kernel library
// (plugins/ABI.md: NAME_enzcc_primal / _vjp / _jvp / _vjp_jvp) with the buffers of its tensors.
//
// Compiled once per machine by enzcc_plugins.tensorflow (cached by TensorFlow version and this file's
// hash) and loaded with tf.load_op_library. Every kernel of every user function is this one op; what
// differs is in its attributes:
//
//   fn, symbol    the entry point's address (the library is loaded by the Python side) and its name. When
//                 TensorFlow constructs the kernel (once per graph node / eager attribute set) it checks
//                 with dladdr that the address is that exported symbol of a loaded library, so a graph
//                 carried to another process is an error instead of a call through a stale address.
//   nptr, nargs   the entry point takes nptr (1, 2 or 4) arrays of nargs pointers (a, d, ta, td).
//   layout        nptr * nargs triples (kind, index, extra) saying what each pointer is (Slot below).
//   ints          the values of integer parameters; extra is their width in bytes (the ABI passes int64_t:
//                 8; narrower widths are kept for entry points that read a C int directly).
//   Tin/in_shapes/in_names   the inputs' dtypes, the shapes the layout was made for, names for errors.
//   Tout/out_shapes          the outputs' dtypes and shapes.
//   scratch_types/scratch_shapes   temporaries (a reverse pass's primal outputs, private seed copies).
//   fn_name       the user-facing name, for errors.
//
// The Python side (plugins/tensorflow.py) builds the layout; this file knows nothing about gradients.

#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace {

using tensorflow::DataType;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::PartialTensorShape;
using tensorflow::Status;
using tensorflow::Tensor;
using tensorflow::TensorShape;
namespace errors = tensorflow::errors;

// What one pointer of an entry point's argument arrays is.
enum Slot : int64_t {
  kNull = 0,         // NULL
  kInput = 1,        // the data of input `index` (read only by contract)
  kOutput = 2,       // the data of output `index`, written by the function
  kOutputZero = 3,   // the data of output `index`, zero-filled first (accumulated gradients)
  kScratch = 4,      // temporary `index` (scratch_types/shapes), uninitialized
  kScratchZero = 5,  // temporary `index`, zero-filled
  kScratchCopy = 6,  // temporary `index`, a private copy of input `extra` (seeds that are consumed)
  kInt = 7,          // the address of ints[index], stored with `extra` bytes
  kOutputCopy = 8,   // the data of output `index`, a copy of input `extra` first
};

using Entry1 = void (*)(void *const *);
using Entry2 = void (*)(void *const *, void *const *);
using Entry4 = void (*)(void *const *, void *const *, void *const *, void *const *);

Status CheckedShapes(const std::vector<PartialTensorShape> &in, const char *what,
                     std::vector<TensorShape> *out) {
  out->clear();
  for (size_t i = 0; i < in.size(); i++) {
    TensorShape s;
    if (!in[i].AsTensorShape(&s)) {
      return errors::InvalidArgument("EnzccCall: ", what, "[", i, "] is not fully defined: ",
                                     in[i].DebugString());
    }
    out->push_back(s);
  }
  return Status();
}

class EnzccCallOp : public OpKernel {
 public:
  explicit EnzccCallOp(OpKernelConstruction *ctx) : OpKernel(ctx) {
    std::string symbol;
    int64_t fn_addr = 0;
    std::vector<PartialTensorShape> in_shapes, out_shapes, scratch_shapes;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("fn", &fn_addr));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("symbol", &symbol));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("fn_name", &fn_name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("nptr", &nptr_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("nargs", &nargs_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("layout", &layout_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("ints", &ints_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("in_names", &in_names_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("Tin", &tin_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("Tout", &tout_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("scratch_types", &scratch_types_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("in_shapes", &in_shapes));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("out_shapes", &out_shapes));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("scratch_shapes", &scratch_shapes));
    OP_REQUIRES_OK(ctx, CheckedShapes(in_shapes, "in_shapes", &in_shapes_));
    OP_REQUIRES_OK(ctx, CheckedShapes(out_shapes, "out_shapes", &out_shapes_));
    OP_REQUIRES_OK(ctx, CheckedShapes(scratch_shapes, "scratch_shapes", &scratch_shapes_));

    // the layout must describe exactly nptr arrays of nargs pointers, each within bounds
    OP_REQUIRES(ctx, nptr_ == 1 || nptr_ == 2 || nptr_ == 4,
                errors::InvalidArgument("EnzccCall: nptr must be 1, 2 or 4, got ", nptr_));
    OP_REQUIRES(ctx, nargs_ >= 0 && static_cast<int64_t>(layout_.size()) == 3 * nptr_ * nargs_,
                errors::InvalidArgument("EnzccCall: layout has ", layout_.size(), " entries, expected 3 * ",
                                        nptr_, " * ", nargs_));
    OP_REQUIRES(ctx, in_shapes_.size() == tin_.size() && in_names_.size() == tin_.size(),
                errors::InvalidArgument("EnzccCall: Tin, in_shapes and in_names differ in length"));
    OP_REQUIRES(ctx, out_shapes_.size() == tout_.size(),
                errors::InvalidArgument("EnzccCall: Tout and out_shapes differ in length"));
    OP_REQUIRES(ctx, scratch_shapes_.size() == scratch_types_.size(),
                errors::InvalidArgument("EnzccCall: scratch_types and scratch_shapes differ in length"));
    int_store_.assign(ints_.size(), 0);
    for (size_t k = 0; k < layout_.size(); k += 3) {
      const int64_t kind = layout_[k], index = layout_[k + 1], extra = layout_[k + 2];
      auto in_range = [](int64_t i, size_t n) { return i >= 0 && static_cast<size_t>(i) < n; };
      bool ok = true;
      switch (kind) {
        case kNull: break;
        case kInput: ok = in_range(index, tin_.size()); break;
        case kOutput:
        case kOutputZero: ok = in_range(index, tout_.size()); break;
        case kOutputCopy:
          ok = in_range(index, tout_.size()) && in_range(extra, tin_.size()) && tout_[index] == tin_[extra] &&
               out_shapes_[index] == in_shapes_[extra];
          break;
        case kScratch:
        case kScratchZero: ok = in_range(index, scratch_types_.size()); break;
        case kScratchCopy:
          ok = in_range(index, scratch_types_.size()) && in_range(extra, tin_.size()) &&
               scratch_types_[index] == tin_[extra] && scratch_shapes_[index] == in_shapes_[extra];
          break;
        case kInt:
          ok = in_range(index, ints_.size()) && (extra == 1 || extra == 2 || extra == 4 || extra == 8);
          if (ok) StoreInt(index, extra);
          break;
        default: ok = false;
      }
      OP_REQUIRES(ctx, ok,
                  errors::InvalidArgument("EnzccCall: bad layout entry ", k / 3, ": (", kind, ", ", index, ", ",
                                          extra, ")"));
    }

    // the address must be the named symbol of a loaded library (dladdr reads no memory at the address)
    Dl_info info;
    void *fn = reinterpret_cast<void *>(static_cast<uintptr_t>(fn_addr));
    OP_REQUIRES(ctx, fn != nullptr && dladdr(fn, &info) != 0 && info.dli_sname != nullptr &&
                         symbol == info.dli_sname && info.dli_saddr == fn,
                errors::FailedPrecondition(fn_name_, ": the address given for ", symbol,
                                           " is not that function in a loaded library (a graph made in "
                                           "another process?); rebuild the op in this process"));
    fn_ = fn;
  }

  void Compute(OpKernelContext *ctx) override {
    const int nin = ctx->num_inputs();
    OP_REQUIRES(ctx, nin == static_cast<int>(tin_.size()),
                errors::InvalidArgument(fn_name_, ": got ", nin, " inputs, expected ", tin_.size()));
    for (int i = 0; i < nin; i++) {
      const TensorShape &got = ctx->input(i).shape();
      OP_REQUIRES(ctx, got == in_shapes_[i],
                  errors::InvalidArgument(fn_name_, ": argument '", in_names_[i], "' has shape ",
                                          got.DebugString(), ", but the op was built for shape ",
                                          in_shapes_[i].DebugString()));
    }
    std::vector<Tensor *> outputs(tout_.size(), nullptr);
    for (size_t j = 0; j < tout_.size(); j++) {
      OP_REQUIRES_OK(ctx, ctx->allocate_output(static_cast<int>(j), out_shapes_[j], &outputs[j]));
    }
    std::vector<Tensor> scratch(scratch_types_.size());
    for (size_t j = 0; j < scratch.size(); j++) {
      OP_REQUIRES_OK(ctx, ctx->allocate_temp(scratch_types_[j], scratch_shapes_[j], &scratch[j]));
    }

    std::vector<void *> ptrs(static_cast<size_t>(nptr_ * nargs_), nullptr);
    for (size_t k = 0; k < ptrs.size(); k++) {
      const int64_t kind = layout_[3 * k], index = layout_[3 * k + 1], extra = layout_[3 * k + 2];
      switch (kind) {
        case kNull: break;
        case kInput: ptrs[k] = Data(ctx->input(static_cast<int>(index))); break;
        case kOutput: ptrs[k] = Data(*outputs[index]); break;
        case kOutputZero: ptrs[k] = Zeroed(outputs[index]); break;
        case kOutputCopy: ptrs[k] = CopyOf(outputs[index], ctx->input(static_cast<int>(extra))); break;
        case kScratch: ptrs[k] = Data(scratch[index]); break;
        case kScratchZero: ptrs[k] = Zeroed(&scratch[index]); break;
        case kScratchCopy: ptrs[k] = CopyOf(&scratch[index], ctx->input(static_cast<int>(extra))); break;
        case kInt: ptrs[k] = &int_store_[index]; break;
      }
    }
    void *const *p = ptrs.data();
    const size_t n = static_cast<size_t>(nargs_);
    switch (nptr_) {
      case 1: reinterpret_cast<Entry1>(fn_)(p); break;
      case 2: reinterpret_cast<Entry2>(fn_)(p, p + n); break;
      case 4: reinterpret_cast<Entry4>(fn_)(p, p + n, p + 2 * n, p + 3 * n); break;
    }
  }

 private:
  static void *Data(const Tensor &t) {
    // TensorFlow's CPU tensors are dense and row-major; tensor_data() is the whole buffer
    return const_cast<char *>(t.tensor_data().data());
  }
  static void *Zeroed(Tensor *t) {
    auto d = t->tensor_data();
    if (d.size() != 0) std::memset(const_cast<char *>(d.data()), 0, d.size());
    return const_cast<char *>(d.data());
  }
  static void *CopyOf(Tensor *dst, const Tensor &src) {
    auto d = dst->tensor_data(), s = src.tensor_data();
    if (d.size() != 0) std::memcpy(const_cast<char *>(d.data()), s.data(), d.size());
    return const_cast<char *>(d.data());
  }
  void StoreInt(int64_t index, int64_t width) {
    // each integer gets a slot of its own (int64 storage, aligned for every width), written with its
    // C type's width: the wrapper reads *(int *)a[i] for an int, *(size_t *)a[i] for a size_t
    int64_t *slot = &int_store_[index];
    const int64_t v = ints_[index];
    switch (width) {
      case 1: { int8_t x = static_cast<int8_t>(v); std::memcpy(slot, &x, 1); break; }
      case 2: { int16_t x = static_cast<int16_t>(v); std::memcpy(slot, &x, 2); break; }
      case 4: { int32_t x = static_cast<int32_t>(v); std::memcpy(slot, &x, 4); break; }
      case 8: std::memcpy(slot, &v, 8); break;
    }
  }

  std::string fn_name_;
  int64_t nptr_ = 0, nargs_ = 0;
  std::vector<int64_t> layout_, ints_, int_store_;
  std::vector<std::string> in_names_;
  std::vector<DataType> tin_, tout_, scratch_types_;
  std::vector<TensorShape> in_shapes_, out_shapes_, scratch_shapes_;
  void *fn_ = nullptr;
};

}  // namespace

REGISTER_OP("EnzccCall")
    .Input("inputs: Tin")
    .Output("outputs: Tout")
    .Attr("Tin: list(type) >= 0")
    .Attr("Tout: list(type) >= 0")
    .Attr("in_shapes: list(shape) >= 0")
    .Attr("out_shapes: list(shape) >= 0")
    .Attr("scratch_types: list(type) >= 0")
    .Attr("scratch_shapes: list(shape) >= 0")
    .Attr("in_names: list(string) >= 0")
    .Attr("fn: int")
    .Attr("symbol: string")
    .Attr("fn_name: string")
    .Attr("mode: string")
    .Attr("key: string")
    .Attr("nptr: int")
    .Attr("nargs: int")
    .Attr("layout: list(int) >= 0")
    .Attr("ints: list(int) >= 0")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext *c) {
      std::vector<PartialTensorShape> out_shapes;
      TF_RETURN_IF_ERROR(c->GetAttr("out_shapes", &out_shapes));
      for (size_t j = 0; j < out_shapes.size(); j++) {
        tensorflow::shape_inference::ShapeHandle h;
        TF_RETURN_IF_ERROR(c->MakeShapeFromPartialTensorShape(out_shapes[j], &h));
        c->set_output(static_cast<int>(j), h);
      }
      return Status();
    })
    .Doc(R"doc(
Calls an entry point of an enzcc-built kernel library (plugins/ABI.md) with the tensors' buffers.
`mode` (primal/vjp/jvp/vjp_jvp) and `key` are read by enzcc_plugins.tensorflow's gradient functions.
)doc");

REGISTER_KERNEL_BUILDER(Name("EnzccCall").Device(tensorflow::DEVICE_CPU), EnzccCallOp);
