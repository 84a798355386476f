"""The CUDA runtime API in host code that is differentiated: ``cudaMalloc``, ``cudaMemcpy``, ``cudaMemset``,
``cudaFree`` and their kin (Enzyme's rules for them: the same calls on the shadow buffers).

A host function that moves its data through device memory (``cudaMalloc(&d, n); cudaMemcpy(d, x, n, H2D);
... cudaMemcpy(y, d, n, D2H)``) carries its derivatives through a *device shadow* of ``d``:

- ``cudaMalloc(&p, n)`` (``cudaMallocManaged``, ``cudaMallocHost``, ``cudaHostAlloc``): the variable ``p``
  gets a shadow (the registry's ``allocates_through``, as for ``posix_memalign``), into which a second
  allocation of the same size, zero-filled, is stored; the reverse of the allocation frees it.
- ``cudaMemcpy(dst, src, n, kind)``: forward, the same copy on the shadows, or the destination's shadow zeroed
  where the source has none (on the side of memory ``kind`` names). Reverse, ``dsrc += ddst; ddst = 0``; the two
  shadows may be in different memory spaces and host code has no kernel to add on the device, so both go
  through host temporaries (copy ``ddst`` and ``dsrc`` to the host, add, copy ``dsrc`` back, zero ``ddst``). The
  copied memory's element type is what the function's accesses say (as for ``memcpy``), following the copies
  that connect device buffers to host memory; a copy whose type is unknown is refused.
- ``cudaMemset``: its destination's shadow is zeroed (both sweeps). ``cudaFree``: forward mode frees the shadow.
- Synchronization, errors, events, streams and device queries carry no derivative. A kernel launch in
  differentiated host code is refused: the derivative of a kernel is made inside it.

Every runtime call the derivative makes is checked: a failure (no device memory left) stops the program with a
message rather than leaving a wrong gradient.
"""

from __future__ import annotations

from enzcc.ad.emit import fail_at_run_time, round_function
from enzcc.ad.errors import ad_error
from enzcc.ad.memory import base_object, byte_offset
from enzcc.ad.registry import CallRule, copied_arguments, register, register_prepared_check
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.instructions import Alloca, Call, Load
from enzcc.ir.values import Argument, ConstantInt, ConstantNull, GlobalRef

#: ``cudaMemcpyKind``
HOST_TO_HOST, HOST_TO_DEVICE, DEVICE_TO_HOST, DEVICE_TO_DEVICE, DEFAULT = range(5)

#: allocation -> (index of its size argument, whether its memory is the device's, its deallocation)
ALLOCATIONS = {"cudaMalloc": (1, True, "cudaFree"), "cudaMallocManaged": (1, True, "cudaFree"),
               "cudaMallocHost": (1, False, "cudaFreeHost"), "cudaHostAlloc": (1, False, "cudaFreeHost")}
#: copies (``_ptds``/``_ptsz``: the same calls under ``--default-stream per-thread``); the async ones take a stream
COPIES = ("cudaMemcpy", "cudaMemcpy_ptds")
ASYNC_COPIES = ("cudaMemcpyAsync", "cudaMemcpyAsync_ptsz")
SETS = ("cudaMemset", "cudaMemset_ptds")
ASYNC_SETS = ("cudaMemsetAsync", "cudaMemsetAsync_ptsz")
FREES = ("cudaFree", "cudaFreeHost")
INACTIVE = ("cudaDeviceSynchronize", "cudaThreadSynchronize", "cudaGetLastError", "cudaPeekAtLastError",
            "cudaGetErrorString", "cudaGetErrorName", "cudaStreamSynchronize", "cudaStreamSynchronize_ptsz",
            "cudaStreamCreate", "cudaStreamCreateWithFlags", "cudaStreamCreateWithPriority", "cudaStreamDestroy",
            "cudaStreamQuery", "cudaStreamQuery_ptsz", "cudaSetDevice", "cudaGetDevice", "cudaGetDeviceCount",
            "cudaGetDeviceProperties", "cudaGetDeviceProperties_v2", "cudaDeviceGetAttribute",
            "cudaDeviceSetLimit", "cudaDeviceGetLimit", "cudaFuncSetAttribute", "cudaMemGetInfo",
            "cudaDriverGetVersion", "cudaRuntimeGetVersion")
#: events (but cudaEventElapsedTime, which writes a float)
INACTIVE_PREFIXES = ("cudaEvent",)
ELAPSED_TIME = "cudaEventElapsedTime"
#: what launches device or stream work that differentiated host code cannot follow
LAUNCHES = ("__cudaPushCallConfiguration", "__cudaPopCallConfiguration", "cudaLaunchKernel", "cudaLaunchKernel_ptsz",
            "cudaLaunchKernelExC", "cudaLaunchKernelExC_ptsz", "cudaLaunchCooperativeKernel",
            "cudaLaunchCooperativeKernel_ptsz", "cudaLaunchCooperativeKernelMultiDevice", "cudaLaunch",
            "cudaConfigureCall", "cudaLaunchHostFunc", "cudaLaunchHostFunc_ptsz", "cudaGraphLaunch",
            "cudaGraphLaunch_ptsz")

_ERR = T.i32  # cudaError_t, cudaMemcpyKind
_MEMCPY = T.FunctionType(_ERR, (T.ptr, T.ptr, T.i64, _ERR))
_MEMSET = T.FunctionType(_ERR, (T.ptr, _ERR, T.i64))


def _runtime(module, name: str, ftype: T.FunctionType):
    return module.get_or_insert_function(name, ftype)


# -- checks the derivative makes at run time ------------------------------------------------------------------

def _fail_if_fn(module):
    """``fail_if(i1 failed)``: stops the program with a message when a runtime call of the derivative failed."""
    def body(fn):
        failed, = fn.args
        entry, fail, done = fn.append_block("entry"), fn.append_block("fail"), fn.append_block("done")
        IRBuilder.at_end(entry).cond_br(failed, fail, done)
        fail_at_run_time(module, IRBuilder.at_end(fail),
                         "a CUDA runtime call of a derivative failed (no device memory left for a shadow, or "
                         "a copy or memset the primal made failed too)")
        IRBuilder.at_end(done).ret_void()
    return round_function(module, "__enzcc_cudart_fail_if", T.FunctionType(T.void, (T.i1,)), body)


def _check(b: IRBuilder, err) -> None:
    """The runtime call that returned ``err`` succeeded, else the program stops."""
    b.call(_fail_if_fn(b.module), [b.icmp("ne", err, ConstantInt(_ERR, 0))])


def _host_buffer(b: IRBuilder, nbytes, zeroed: bool = False):
    """A host temporary of ``nbytes`` (one more byte: ``malloc(0)`` may return null), checked."""
    module = b.module
    n1 = b.add(nbytes, ConstantInt(T.i64, 1))
    if zeroed:
        p = b.call(_runtime(module, "calloc", T.FunctionType(T.ptr, (T.i64, T.i64))), [n1, ConstantInt(T.i64, 1)])
    else:
        p = b.call(_runtime(module, "malloc", T.FunctionType(T.ptr, (T.i64,))), [n1])
    b.call(_fail_if_fn(module), [b.icmp("eq", p, ConstantNull(T.ptr))])
    return p


def _free_host(b: IRBuilder, p) -> None:
    b.call(_runtime(b.module, "free", T.FunctionType(T.void, (T.ptr,))), [p])


# -- the sides of a copy --------------------------------------------------------------------------------------

class _Sides:
    """What a copy's ``kind`` (a value known only at run time, in general) says of its two sides: the kinds that
    move a side's bytes to a host temporary and back (``cudaMemcpyDefault`` for both under unified addressing)."""

    def __init__(self, b: IRBuilder, kind):
        def eq(k):
            return b.icmp("eq", kind, ConstantInt(_ERR, k))

        self.default = eq(DEFAULT)
        self.device_dst = b.or_(eq(HOST_TO_DEVICE), eq(DEVICE_TO_DEVICE))
        self.device_src = b.or_(eq(DEVICE_TO_HOST), eq(DEVICE_TO_DEVICE))
        self.b = b

    def _pick(self, device, if_device: int, if_host: int):
        b = self.b
        return b.select(self.default, ConstantInt(_ERR, DEFAULT),
                        b.select(device, ConstantInt(_ERR, if_device), ConstantInt(_ERR, if_host)))

    def to_host(self, device):
        return self._pick(device, DEVICE_TO_HOST, HOST_TO_HOST)

    def from_host(self, device):
        return self._pick(device, HOST_TO_DEVICE, HOST_TO_HOST)


def _refuse_bad_kind(b: IRBuilder, kind) -> None:
    """A copy kind that is none of cudaMemcpyKind's five: the primal copy failed, and the derivative stops."""
    b.call(_fail_if_fn(b.module), [b.icmp("ugt", kind, ConstantInt(_ERR, DEFAULT))])


def _zero_fn(module):
    """``zero(p, nbytes, kind)``: the destination of a copy of ``kind`` zeroed: ``cudaMemset`` on the device,
    ``memset`` on the host, a copy from a zeroed host temporary under unified addressing (``cudaMemcpyDefault``:
    either side)."""
    def body(fn):
        p, n, kind = fn.args
        entry, device, other, host, default, done = (fn.append_block(x) for x in
                                                     ("entry", "device", "other", "host", "default", "done"))
        b = IRBuilder.at_end(entry)
        _refuse_bad_kind(b, kind)
        sides = _Sides(b, kind)
        b.cond_br(sides.device_dst, device, other)
        d = IRBuilder.at_end(device)
        _check(d, d.call(_runtime(module, "cudaMemset", _MEMSET), [p, ConstantInt(_ERR, 0), n]))
        d.br(done)
        o = IRBuilder.at_end(other)
        o.cond_br(sides.default, default, host)
        h = IRBuilder.at_end(host)
        h.memset(p, 0, n)
        h.br(done)
        u = IRBuilder.at_end(default)
        t = _host_buffer(u, n, zeroed=True)
        _check(u, u.call(_runtime(module, "cudaMemcpy", _MEMCPY), [p, t, n, ConstantInt(_ERR, DEFAULT)]))
        _free_host(u, t)
        u.br(done)
        IRBuilder.at_end(done).ret_void()
    return round_function(module, "__enzcc_cudart_zero", T.FunctionType(T.void, (T.ptr, T.i64, _ERR)), body)


def _adjoint_fn(module, add_fn, elem: T.Type):
    """``adjoint(ddst, dsrc, nbytes, kind)``: the reverse of ``cudaMemcpy(dst, src, nbytes, kind)`` on ``elem``
    data: ``dsrc += ddst; ddst = 0``, through two host temporaries (``add_fn``: the host's element-wise
    ``dsrc += ddst; ddst = 0``, :meth:`enzcc.ad.tape.Tape.memcpy_adjoint_helper`)."""
    def body(fn):
        ddst, dsrc, n, kind = fn.args
        b = IRBuilder.at_end(fn.append_block("entry"))
        _refuse_bad_kind(b, kind)
        sides = _Sides(b, kind)
        memcpy = _runtime(module, "cudaMemcpy", _MEMCPY)
        tdst, tsrc = _host_buffer(b, n), _host_buffer(b, n)
        _check(b, b.call(memcpy, [tdst, ddst, n, sides.to_host(sides.device_dst)]))
        _check(b, b.call(memcpy, [tsrc, dsrc, n, sides.to_host(sides.device_src)]))
        b.call(add_fn, [tdst, tsrc, n, ConstantInt(T.i1, 1)])  # (tdst is zero after it)
        _check(b, b.call(memcpy, [dsrc, tsrc, n, sides.from_host(sides.device_src)]))
        _check(b, b.call(memcpy, [ddst, tdst, n, sides.from_host(sides.device_dst)]))
        _free_host(b, tdst)
        _free_host(b, tsrc)
        b.ret_void()
    return round_function(module, f"__enzcc_cudart_copy_adjoint_{elem}",
                          T.FunctionType(T.void, (T.ptr, T.ptr, T.i64, _ERR)), body)


# -- what a copy copies ---------------------------------------------------------------------------------------

def _object_key(p):
    """The memory object ``p`` points into; a pointer loaded from a variable (each ``load`` of the variable
    ``cudaMalloc`` filled) stands for the variable's contents, the same buffer every time."""
    base = base_object(p)
    if isinstance(base, Load) and isinstance(base.type, T.PointerType):
        module = base.module
        slot, off = byte_offset(base.pointer, module.data_layout) if module is not None else (None, None)
        if isinstance(slot, (Alloca, Argument, GlobalRef)) and off is not None:
            return ("variable", slot.symbol if isinstance(slot, GlobalRef) else id(slot), off)
    return ("object", id(base))


def _copy_web(call: Call) -> list:
    """The pointers to every object connected to ``call``'s two by copies (cudaMemcpy and memcpy alike) in its
    function, with the pointers loaded from a variable they come from (each ``load`` of a ``cudaMalloc``'d
    variable at -O0): a device buffer's type is that of the host memory copied into or out of it."""
    copies, loaded = [], []
    for inst in call.function.instructions():
        if isinstance(inst, Load) and isinstance(inst.type, T.PointerType):
            loaded.append(inst)
        elif isinstance(inst, Call):
            copied = copied_arguments(inst)
            if copied is not None:
                copies.append(copied[:2])
            elif (inst.callee_name or "").startswith(("llvm.memcpy", "llvm.memmove")):
                copies.append(tuple(inst.args[:2]))
    keys = {_object_key(call.args[0]), _object_key(call.args[1])}
    grew = True
    while grew:
        grew = False
        for pair in copies:
            k = {_object_key(p) for p in pair}
            if k & keys and not k <= keys:
                keys |= k
                grew = True
    return [p for p in [*(p for pair in copies for p in pair), *loaded] if _object_key(p) in keys]


def _copied_type(mode, call: Call):
    """The element type a cudaMemcpy moves: a FloatType, an IntType (nothing to add) or ``T.ptr``; refused
    when unknown or mixed."""
    kind = mode.memtypes.copy_kind(call)
    if kind is not None:
        return kind
    kinds = set()
    for p in _copy_web(call):
        kinds |= mode.memtypes.access_kinds(p)
    floats = {k for k in kinds if isinstance(k, T.FloatType)}
    if len(floats) == 1 and not any(isinstance(k, T.PointerType) for k in kinds):
        return floats.pop()
    if kinds and all(isinstance(k, T.IntType) for k in kinds):
        return next(iter(kinds))
    raise ad_error(f"cannot tell whether the memory this {call.callee_name} copies holds floating-point values of "
                   "one type (nothing in the function or its caller reads or writes it, or the memory copied into "
                   "or out of it, with one type)", call)


# -- allocations ----------------------------------------------------------------------------------------------

def _mirror_allocation(shadows, call: Call) -> None:
    """``cudaMalloc(&p, n)``: a zero-filled allocation of ``n`` bytes by the same function, stored into the
    shadow of ``p``."""
    name = call.callee_name
    size_index, device, _ = ALLOCATIONS[name]
    out = call.args[0]
    if not shadows.activity.is_active_ptr(out):
        raise ad_error(f"{name} stores the address it allocates into memory without a shadow (a global "
                       "variable, memory reached from an enzyme_const argument); allocate into a local variable "
                       "so that enzcc can give the buffer a shadow", call, fn=shadows.fn)
    module = shadows.fn.module
    b = IRBuilder.after(call)
    args = list(call.args)
    args[0] = shadows.of(out, call)
    _check(b, b.call(module.get_or_insert_function(name, call.function_type), args))
    s = b.load(T.ptr, args[0])
    n = call.args[size_index]
    if device:
        _check(b, b.call(_runtime(module, "cudaMemset", _MEMSET), [s, ConstantInt(_ERR, 0), n]))
    else:
        b.memset(s, 0, n)
    shadows.allocations.append((call, s))


def _forward_allocation(mode, call: Call) -> bool:
    return True  # (the shadow allocation was made with the shadows: _mirror_allocation)


def _reverse_allocation(mode, call: Call, entry, block, b: IRBuilder) -> bool:
    """The reverse of an allocation frees its shadow (not noted as the engine's shadow frees, which a replayed
    tape turns into host memsets: split mode is refused)."""
    if mode.split:
        raise ad_error(f"{call.callee_name} in a function differentiated in split mode (__enzyme_augmentfwd, "
                       "__enzyme_reverse) is not supported", call)
    dealloc = ALLOCATIONS[call.callee_name][2]
    for made, shadow in mode.shadows.allocations:
        if made is call:
            free = _runtime(mode.module, dealloc, T.FunctionType(_ERR, (T.ptr,)))
            _check(b, b.call(free, [mode._primal(shadow, block, b)]))
    return True


def _forward_free(mode, call: Call) -> bool:
    """The primal is released: so is its shadow (by the same function)."""
    p = call.args[0]
    if mode._releases_shadow(p):
        b = IRBuilder.after(call)
        _check(b, _call_again_at(b, call, [mode.shadows.of(p)]))
    return True


def _call_again_at(b: IRBuilder, call: Call, args):
    """The same function as ``call``'s called at ``b`` with ``args``."""
    callee = call.callee.resolve() if hasattr(call.callee, "resolve") else call.callee
    return b.call(callee, list(args))


# -- copies ---------------------------------------------------------------------------------------------------

def _forward_copy(mode, call: Call) -> bool:
    """The same copy on the shadows, or the destination's shadow zeroed where the source has none."""
    act = mode.activity
    dst, src, n, kind = call.args[:4]
    if not act.is_active_ptr(dst):
        return True
    b = IRBuilder.after(call)
    ddst = mode.shadows.of(dst, call)
    if act.is_active_ptr(src):
        _check(b, _call_again_at(b, call, [ddst, mode.shadows.of(src, call), *call.args[2:]]))
        return True
    if call.callee_name in ASYNC_COPIES:  # (earlier copies into the shadow on the stream are done first)
        sync = _runtime(mode.module, "cudaStreamSynchronize", T.FunctionType(_ERR, (T.ptr,)))
        _check(b, b.call(sync, [call.args[4]]))
    b.call(_zero_fn(mode.module), [ddst, n, kind])
    return True


def _reverse_copy(mode, call: Call, entry, block, b: IRBuilder) -> bool:
    """``dsrc += ddst; ddst = 0`` (synchronous, through host temporaries: :func:`_adjoint_fn`)."""
    act = mode.activity
    dst, src, n, kind = call.args[:4]
    if not act.is_active_ptr(dst):
        return True  # (no derivative was copied: the source's adjoint stays)
    if mode.concurrent:
        raise ad_error(f"the reverse of {call.callee_name} in an OpenMP parallel region is not supported", call)
    ddst = mode._shadow(dst, block, b, call)
    nbytes, k = mode._primal(n, block, b), mode._primal(kind, block, b)
    if not act.is_active_ptr(src):  # bytes without derivatives overwrote it: its adjoint is zero
        b.call(_zero_fn(mode.module), [ddst, nbytes, k])
        return True
    elem = _copied_type(mode, call)
    if isinstance(elem, T.PointerType):
        raise ad_error(f"reverse mode through a {call.callee_name} of memory that holds pointers is not supported",
                       call)
    if not isinstance(elem, T.FloatType):
        return True  # integers carry no adjoint
    helper = _adjoint_fn(mode.module, mode.tape.memcpy_adjoint_helper(elem), elem)
    b.call(helper, [ddst, mode._shadow(src, block, b, call), nbytes, k])
    return True


# -- memset ---------------------------------------------------------------------------------------------------

def _forward_set(mode, call: Call) -> bool:
    """The destination's shadow zeroed, as the primal's bytes were set (on the same stream)."""
    dst = call.args[0]
    if mode.activity.is_active_ptr(dst):
        b = IRBuilder.after(call)
        _check(b, _call_again_at(b, call, [mode.shadows.of(dst, call), ConstantInt(_ERR, 0), *call.args[2:]]))
    return True


def _reverse_set(mode, call: Call, entry, block, b: IRBuilder) -> bool:
    """The adjoint of the bytes set is zero."""
    dst = call.args[0]
    if mode.activity.is_active_ptr(dst):
        memset = _runtime(mode.module, "cudaMemset", _MEMSET)
        _check(b, b.call(memset, [mode._shadow(dst, block, b, call), ConstantInt(_ERR, 0),
                                  mode._primal(call.args[2], block, b)]))
    return True


# -- an elapsed time written into memory with derivatives -----------------------------------------------------

def _forward_elapsed(mode, call: Call) -> bool:
    if mode.activity.is_active_ptr(call.args[0]):
        IRBuilder.after(call).store(IRBuilder.const_zero(T.f32), mode.shadows.of(call.args[0], call))
    return True


def _reverse_elapsed(mode, call: Call, entry, block, b: IRBuilder) -> bool:
    if mode.activity.is_active_ptr(call.args[0]):
        b.store(IRBuilder.const_zero(T.f32), mode._shadow(call.args[0], block, b, call))
    return True


# -- what is refused ------------------------------------------------------------------------------------------

_ALL = (*ALLOCATIONS, *COPIES, *ASYNC_COPIES, *SETS, *ASYNC_SETS, *FREES, ELAPSED_TIME)


def _refuse(fn, call: Call, forward: bool) -> None:
    """A kernel launch in differentiated host code (its derivative is made inside the kernel), and the runtime's
    memory functions in device code."""
    name = call.callee_name or ""
    if name in LAUNCHES:
        what = "<<<...>>>" if name.startswith("__cuda") else name
        raise ad_error(f"a kernel launch ({what}) in differentiated host code is not supported: differentiate "
                       "inside the kernel (call __enzyme_autodiff or __enzyme_fwddiff in a __global__ function "
                       "on a __device__ function)", call)
    if name in _ALL and fn.module is not None and fn.module.targets_gpu:
        raise ad_error(f"{name} in differentiated device code is not supported", call)


_COPY_RULE = CallRule("cudart", copies=(0, 1, 2), forward=_forward_copy, reverse=_reverse_copy)
register(_COPY_RULE, names=(*COPIES, *ASYNC_COPIES))
register(CallRule("cudart", forward=_forward_set, reverse=_reverse_set), names=(*SETS, *ASYNC_SETS))
register(CallRule("cudart", allocates_through=0, mirror=_mirror_allocation, forward=_forward_allocation,
                  reverse=_reverse_allocation), names=tuple(ALLOCATIONS))
# (the reverse of a release is nothing: a shadow goes at the reverse of its allocation)
register(CallRule("cudart", inactive=True, forward=_forward_free), names=FREES)
register(CallRule("cudart", inactive=True, forward=_forward_elapsed, reverse=_reverse_elapsed), names=(ELAPSED_TIME,))
register(CallRule("cudart", inactive=True), names=INACTIVE, prefixes=INACTIVE_PREFIXES)
register_prepared_check(_refuse)

__all__ = ["ALLOCATIONS", "ASYNC_COPIES", "ASYNC_SETS", "COPIES", "FREES", "INACTIVE", "LAUNCHES", "SETS"]
