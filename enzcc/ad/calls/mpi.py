"""MPI (Open MPI's C API) in differentiated code: point-to-point messages, non-blocking ones with their waits,
and the collectives, forward and reverse (the rules Enzyme's MPI support and AMPI follow, written here anew).

What a message carries: a message whose datatype is ``MPI_DOUBLE``, ``MPI_FLOAT`` or a contiguous type of them
(``MPI_Type_contiguous``, ``MPI_Type_dup``) carries derivatives, and always has a derivative message, whatever
the activity of the buffer on this rank says (zeros are sent from a buffer without derivatives, and what
arrives for one is dropped): the two ranks of a message run the same program but their analyses do not see
each other, and a derivative message one side waits for and the other never sends would hang the program.
Messages of other predefined types (integers, bytes) carry nothing; one of them on memory with derivatives is
refused at compile time, and a derived type that is not contiguous over double or float at run time (the
message names the call).

Forward mode repeats each call on the shadows (``MPI_Send(dx)`` after ``MPI_Send(x)``: messages between two
ranks with one tag arrive in the order they were sent, so the derivative message follows its primal); for a
minimum or maximum, the tangent is that of the rank that won (the lowest such rank on a tie).

Reverse mode, with ``dx`` the shadow of ``x``:

- ``MPI_Send(x)``: receive the adjoint from the destination and add it into ``dx``; ``MPI_Recv(x)``: send
  ``dx`` back to the source, then zero it (not for ``MPI_PROC_NULL``, which wrote nothing). ``MPI_Sendrecv``: both
  in one ``MPI_Sendrecv``. A receive from ``MPI_ANY_SOURCE`` or with ``MPI_ANY_TAG`` is refused.
- ``MPI_Isend``/``MPI_Irecv``: the call writes a request; a record of the call (its shadow buffer, count,
  datatype, peer, tag, communicator) is noted under that request, and ``MPI_Wait``/``MPI_Waitall`` take the
  records of the requests they complete, in the order the calls were made. The records are SSA values of the
  forward sweep, so the engine keeps them on the tape like any other value. The reverse of the wait posts the
  adjoint operations (an ``MPI_Irecv`` into a temporary for a send, an ``MPI_Isend`` of the shadow for a
  receive) and the reverse of ``MPI_Isend``/``MPI_Irecv`` waits for its adjoint operation, then adds the
  temporary into the shadow or zeroes the shadow.
- ``MPI_Allreduce`` (sum): ``dsend += Allreduce_sum(drecv); drecv = 0``. ``MPI_Reduce`` (sum): the root's
  adjoint is broadcast and added on every rank. Minimum and maximum: the same, but only the rank that won adds
  (the winners are found in the forward sweep: an ``MPI_Allreduce`` with the call's operation, then one of
  ``MPI_MIN`` over the ranks whose value equals it). ``MPI_Bcast``: the adjoints are summed to the root
  (``MPI_Reduce``), which takes the sum; the other ranks' are zeroed. ``MPI_Gather`` and ``MPI_Scatter`` are each
  other's adjoint; ``MPI_Allgather``'s is ``MPI_Reduce_scatter_block``. ``MPI_IN_PLACE`` is supported for the
  reductions; other operations (``MPI_PROD``, user operations) are refused.
- ``MPI_Barrier``, ``MPI_Comm_rank``/``size``, ``MPI_Wtime``, ``MPI_Init``/``Finalize`` and the datatype
  constructors carry nothing. ``MPI_Type_free`` in reverse mode is deferred to the reverse of the type's
  ``MPI_Type_commit`` (the reverse sweep still sends messages of that type). ``MPI_Test`` & co. are refused (their
  requests would escape the waits' records); any other MPI call through which derivatives flow has no rule: the
  engine's one-line error names it.

Not in vector mode (``enzyme_width``) nor in an OpenMP parallel region (refused). An MPI error aborts the
program (Open MPI's default error handler), so the derivative's own calls need no checks.
"""

from __future__ import annotations

from enzcc.ad.emit import counted_loop_function, fail_at_run_time, fail_call_at_run_time_if, round_function
from enzcc.ad.errors import ad_error
from enzcc.ad.registry import CallRule, register, register_prepared_check
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.instructions import Call
from enzcc.ir.values import ConstantExpr, ConstantInt, ConstantNull, GlobalRef

#: Open MPI's predefined datatypes that carry derivatives, by the global their handle points to: element bytes
FLOAT_TYPES = {"ompi_mpi_double": 8, "ompi_mpi_float": 4, "ompi_mpi_double_precision": 8, "ompi_mpi_real": 4,
               "ompi_mpi_real8": 8, "ompi_mpi_real4": 4}
#: those a derived type is compared with when the program runs (the others live in Open MPI's Fortran library)
C_FLOAT_TYPES = {"ompi_mpi_double": 8, "ompi_mpi_float": 4}
SUM, MIN, MAX = "ompi_mpi_op_sum", "ompi_mpi_op_min", "ompi_mpi_op_max"
ANY_SOURCE = ANY_TAG = -1
PROC_NULL = -2
COMBINER_NAMED, COMBINER_DUP, COMBINER_CONTIGUOUS = 0, 1, 2

#: each supported call's parameters (C order); buffers are ``buf``/``sbuf``/``rbuf``, their datatypes follow
SIGNATURES = {
    "MPI_Send": ("buf", "count", "type", "peer", "tag", "comm"),
    "MPI_Recv": ("buf", "count", "type", "peer", "tag", "comm", "status"),
    "MPI_Isend": ("buf", "count", "type", "peer", "tag", "comm", "req"),
    "MPI_Irecv": ("buf", "count", "type", "peer", "tag", "comm", "req"),
    "MPI_Sendrecv": ("sbuf", "scount", "stype", "dest", "stag", "rbuf", "rcount", "rtype", "src", "rtag", "comm",
                     "status"),
    "MPI_Wait": ("req", "status"),
    "MPI_Waitall": ("n", "reqs", "statuses"),
    "MPI_Bcast": ("buf", "count", "type", "root", "comm"),
    "MPI_Reduce": ("sbuf", "rbuf", "count", "type", "op", "root", "comm"),
    "MPI_Allreduce": ("sbuf", "rbuf", "count", "type", "op", "comm"),
    "MPI_Gather": ("sbuf", "scount", "stype", "rbuf", "rcount", "rtype", "root", "comm"),
    "MPI_Scatter": ("sbuf", "scount", "stype", "rbuf", "rcount", "rtype", "root", "comm"),
    "MPI_Allgather": ("sbuf", "scount", "stype", "rbuf", "rcount", "rtype", "comm"),
}
#: calls that never carry a derivative
INACTIVE = ("MPI_Init", "MPI_Init_thread", "MPI_Finalize", "MPI_Initialized", "MPI_Finalized", "MPI_Abort",
            "MPI_Comm_rank", "MPI_Comm_size", "MPI_Wtime", "MPI_Wtick", "MPI_Barrier", "MPI_Get_processor_name",
            "MPI_Type_contiguous", "MPI_Type_size", "MPI_Type_dup",
            "MPI_Comm_dup", "MPI_Comm_free", "MPI_Comm_split", "MPI_Get_count", "MPI_Query_thread")

_I32, _PTR = T.i32, T.ptr
#: the MPI functions the derivative calls
_MPI = {
    "MPI_Send": (_PTR, _I32, _PTR, _I32, _I32, _PTR),
    "MPI_Recv": (_PTR, _I32, _PTR, _I32, _I32, _PTR, _PTR),
    "MPI_Isend": (_PTR, _I32, _PTR, _I32, _I32, _PTR, _PTR),
    "MPI_Irecv": (_PTR, _I32, _PTR, _I32, _I32, _PTR, _PTR),
    "MPI_Wait": (_PTR, _PTR),
    "MPI_Sendrecv": (_PTR, _I32, _PTR, _I32, _I32, _PTR, _I32, _PTR, _I32, _I32, _PTR, _PTR),
    "MPI_Bcast": (_PTR, _I32, _PTR, _I32, _PTR),
    "MPI_Reduce": (_PTR, _PTR, _I32, _PTR, _PTR, _I32, _PTR),
    "MPI_Allreduce": (_PTR, _PTR, _I32, _PTR, _PTR, _PTR),
    "MPI_Gather": (_PTR, _I32, _PTR, _PTR, _I32, _PTR, _I32, _PTR),
    "MPI_Scatter": (_PTR, _I32, _PTR, _PTR, _I32, _PTR, _I32, _PTR),
    "MPI_Allgather": (_PTR, _I32, _PTR, _PTR, _I32, _PTR, _PTR),
    "MPI_Reduce_scatter_block": (_PTR, _PTR, _I32, _PTR, _PTR, _PTR),
    "MPI_Comm_rank": (_PTR, _PTR),
    "MPI_Comm_size": (_PTR, _PTR),
    "MPI_Type_size": (_PTR, _PTR),
    "MPI_Type_get_envelope": (_PTR, _PTR, _PTR, _PTR, _PTR),
    "MPI_Type_get_contents": (_PTR, _I32, _I32, _I32, _PTR, _PTR, _PTR),
    "MPI_Type_free": (_PTR,),
}


def _global(module, name: str):
    """``@name``, declared (as opaque external data) when the program does not name it."""
    if name not in module.globals and name not in module.functions:
        module.add_global(name, T.i8, linkage="external")
    return module.global_ref(name)


def is_in_place(v) -> bool:
    """Whether ``v`` is ``MPI_IN_PLACE`` (Open MPI: ``(void *) 1``)."""
    return isinstance(v, ConstantExpr) and v.opcode == "inttoptr" and len(v.operands) == 1 and \
        isinstance(v.operands[0], ConstantInt) and v.operands[0].value == 1


def _i32(x: int):
    return ConstantInt(_I32, x)


def _i64(x: int):
    return ConstantInt(T.i64, x)


class _Emit:
    """Small steps of the derivative code at a builder: MPI calls, temporaries, element-wise adds."""

    def __init__(self, b: IRBuilder, module):
        self.b, self.module = b, module

    def mpi(self, name: str, args):
        return self.b.call(self.module.get_or_insert_function(name, T.FunctionType(_I32, _MPI[name])), list(args))

    def libc(self, name: str, ret, params, args):
        return self.b.call(self.module.get_or_insert_function(name, T.FunctionType(ret, tuple(params))), list(args))

    def calloc(self, nbytes):
        """A zeroed temporary of ``nbytes`` (one more: ``calloc(0)`` may return null)."""
        return self.libc("calloc", _PTR, (T.i64, T.i64), [self.b.add(nbytes, _i64(1)), _i64(1)])

    def spare(self, p, nbytes):
        """A zeroed stand-in for the buffer ``p`` where it is null (``nbytes``), else a byte: what is sent
        instead of a shadow that does not exist, or received into."""
        return self.calloc(self.b.select(self.null(p), nbytes, _i64(0)))

    def free(self, p) -> None:
        self.libc("free", T.void, (_PTR,), [p])

    def base(self, nbytes, es):
        """``(count, datatype)`` of ``nbytes`` as MPI_DOUBLE or MPI_FLOAT elements (by ``es``): what a sum of
        derivatives sends (MPI's sums are defined on predefined types only)."""
        b = self.b
        count = b.trunc(b.udiv(nbytes, b.zext(es, T.i64)), _I32)
        return count, b.select(b.icmp("eq", es, _i32(8)), _global(self.module, "ompi_mpi_double"),
                               _global(self.module, "ompi_mpi_float"))

    def nbytes(self, count, dt):
        return self.b.call(_bytes_fn(self.module), [count, dt])

    def query(self, what: str, comm):
        return self.b.call(_query_fn(self.module, what), [comm])

    def null(self, p):
        return self.b.icmp("eq", p, ConstantNull(_PTR))

    def either(self, p, q):
        """``p`` unless it is null, else ``q``."""
        return self.b.select(self.null(p), q, p)

    def zero(self, p, nbytes, when) -> None:
        """``memset(p, 0, nbytes)`` where ``when`` (an i1) holds; ``p`` is not null then."""
        self.b.memset(p, 0, self.b.select(when, nbytes, _i64(0)))

    def add(self, tape, dst, src, nbytes, esize, when) -> None:
        """``dst += src`` element-wise (doubles or floats, by ``esize``) where ``when`` holds."""
        self.b.call(_add_fn(self.module, tape), [dst, src, self.b.select(when, nbytes, _i64(0)), esize])


# -- helpers of the derivative code (internal functions, one per module and round) ---------------------------

def _bytes_fn(module):
    """``bytes(count, datatype)``: ``count * MPI_Type_size(datatype)``, as i64."""
    def body(fn):
        count, dt = fn.args
        b = IRBuilder.at_end(fn.append_block("entry"))
        slot = b.alloca(_I32)
        _Emit(b, module).mpi("MPI_Type_size", [dt, slot])
        b.ret(b.mul(b.sext(count, T.i64), b.sext(b.load(_I32, slot), T.i64)))
    return round_function(module, "__enzcc_mpi_bytes", T.FunctionType(T.i64, (_I32, _PTR)), body)


def _query_fn(module, what: str):
    """``MPI_Comm_rank`` / ``MPI_Comm_size`` of a communicator, as a value."""
    def body(fn):
        b = IRBuilder.at_end(fn.append_block("entry"))
        slot = b.alloca(_I32)
        _Emit(b, module).mpi(f"MPI_Comm_{what}", [fn.args[0], slot])
        b.ret(b.load(_I32, slot))
    return round_function(module, f"__enzcc_mpi_{what}", T.FunctionType(_I32, (_PTR,)), body)


def _esize_fn(module):
    """``esize(datatype)``: 8 for MPI_DOUBLE, 4 for MPI_FLOAT, the same for a contiguous type or a duplicate of
    them (followed through ``MPI_Type_get_contents``, whose derived handles are released), 0 for anything else."""
    def body(fn):
        dt, = fn.args
        entry, head, found, envelope, follow, none, release, zero = (
            fn.append_block(n) for n in ("entry", "head", "found", "envelope", "follow", "none", "release", "zero"))
        b = IRBuilder.at_end(entry)
        cur, owned = b.alloca(_PTR), b.alloca(_I32)
        counts = b.alloca(_I32, 4)
        ints, addrs, types = b.alloca(_I32, 8), b.alloca(T.i64, 8), b.alloca(_PTR, 8)
        b.store(dt, cur)
        b.store(_i32(0), owned)
        b.br(head)
        h = IRBuilder.at_end(head)
        c = h.load(_PTR, cur)
        size = _i32(0)
        for name, n in sorted(C_FLOAT_TYPES.items()):
            size = h.select(h.icmp("eq", c, _global(module, name)), _i32(n), size)
        h.cond_br(h.icmp("ne", size, _i32(0)), found, envelope)
        IRBuilder.at_end(found).ret(size)  # (a predefined handle: never released)
        eb = IRBuilder.at_end(envelope)
        ptrs = [eb.gep(_I32, counts, [_i32(k)]) for k in range(4)]
        _Emit(eb, module).mpi("MPI_Type_get_envelope", [c, *ptrs])
        ni, na, nd, comb = (eb.load(_I32, p) for p in ptrs)
        small = eb.and_(eb.and_(eb.icmp("sle", ni, _i32(8)), eb.icmp("sle", na, _i32(8))),
                        eb.icmp("eq", nd, _i32(1)))
        simple = eb.or_(eb.icmp("eq", comb, _i32(COMBINER_CONTIGUOUS)), eb.icmp("eq", comb, _i32(COMBINER_DUP)))
        eb.cond_br(eb.and_(small, simple), follow, none)
        fb = IRBuilder.at_end(follow)
        _Emit(fb, module).mpi("MPI_Type_get_contents", [c, ni, na, nd, ints, addrs, types])
        nxt = fb.load(_PTR, types)
        fb.call(_release_fn(module), [cur, fb.load(_I32, owned)])
        fb.store(nxt, cur)
        fb.store(_i32(1), owned)
        fb.br(head)
        nb = IRBuilder.at_end(none)  # (a derived handle get_contents gave is released; a predefined one is not)
        derived = nb.and_(nb.icmp("ne", nb.load(_I32, owned), _i32(0)), nb.icmp("ne", comb, _i32(COMBINER_NAMED)))
        nb.cond_br(derived, release, zero)
        rb = IRBuilder.at_end(release)
        _Emit(rb, module).mpi("MPI_Type_free", [cur])
        rb.br(zero)
        IRBuilder.at_end(zero).ret(_i32(0))
    return round_function(module, "__enzcc_mpi_esize", T.FunctionType(_I32, (_PTR,)), body)


def _release_fn(module):
    """``release(slot, owned)``: ``MPI_Type_free(slot)`` when ``owned`` (a derived handle get_contents gave)."""
    def body(fn):
        slot, owned = fn.args
        entry, free, done = fn.append_block("entry"), fn.append_block("free"), fn.append_block("done")
        IRBuilder.at_end(entry).cond_br(IRBuilder.at_end(entry).icmp("ne", owned, _i32(0)), free, done)
        fb = IRBuilder.at_end(free)
        _Emit(fb, module).mpi("MPI_Type_free", [slot])
        fb.br(done)
        IRBuilder.at_end(done).ret_void()
    return round_function(module, "__enzcc_mpi_release", T.FunctionType(T.void, (_PTR, _I32)), body)


def _add_fn(module, tape):
    """``add(dst, src, nbytes, esize)``: ``dst += src`` element-wise, doubles (esize 8) or floats (``src`` is
    zeroed on the way: :meth:`enzcc.ad.tape.Tape.memcpy_adjoint_helper`)."""
    def body(fn):
        dst, src, n, esize = fn.args
        entry, dbl, flt = fn.append_block("entry"), fn.append_block("double"), fn.append_block("float")
        b = IRBuilder.at_end(entry)
        b.cond_br(b.icmp("eq", esize, _i32(8)), dbl, flt)
        for block, elem in ((dbl, T.f64), (flt, T.f32)):
            bb = IRBuilder.at_end(block)
            bb.call(tape.memcpy_adjoint_helper(elem), [src, dst, n, ConstantInt(T.i1, 1)])
            bb.ret_void()
    return round_function(module, "__enzcc_mpi_add", T.FunctionType(T.void, (_PTR, _PTR, T.i64, _I32)), body)


def _winners_fn(module):
    """``winners(x, y, w, esize, rank, size, nbytes)``: ``w[i] = x[i] == y[i] ? rank : size`` (y: the reduced
    values), doubles or floats."""
    def step_for(elem):
        def step(b, args, i):
            x, y, w, rank, size = args
            same = b.fcmp("oeq", b.load(elem, b.gep(elem, x, [i])), b.load(elem, b.gep(elem, y, [i])))
            b.store(b.select(same, rank, size), b.gep(_I32, w, [i]))
        return step
    loops = {elem: counted_loop_function(module, f"__enzcc_mpi_winners_{elem}", (_PTR, _PTR, _PTR, _I32, _I32), step_for(elem))
             for elem in (T.f64, T.f32)}

    def body(fn):
        x, y, w, esize, rank, size, n = fn.args
        entry, dbl, flt = fn.append_block("entry"), fn.append_block("double"), fn.append_block("float")
        b = IRBuilder.at_end(entry)
        b.cond_br(b.icmp("eq", esize, _i32(8)), dbl, flt)
        for block, elem in ((dbl, T.f64), (flt, T.f32)):
            bb = IRBuilder.at_end(block)
            bb.call(loops[elem], [x, y, w, rank, size, bb.udiv(n, bb.zext(esize, T.i64))])
            bb.ret_void()
    return round_function(module, "__enzcc_mpi_winners",
                          T.FunctionType(T.void, (_PTR, _PTR, _PTR, _I32, _I32, _I32, T.i64)), body)


def _mask_fn(module):
    """``mask(p, w, esize, rank, nbytes)``: ``p[i] = w[i] == rank ? p[i] : 0`` (w null: nothing), doubles or
    floats: what reaches the rank that won an element of a minimum or maximum."""
    def step_for(elem):
        def step(b, args, i):
            p, w, rank = args
            q = b.gep(elem, p, [i])
            won = b.icmp("eq", b.load(_I32, b.gep(_I32, w, [i])), rank)
            b.store(b.select(won, b.load(elem, q), IRBuilder.const_zero(elem)), q)
        return step
    loops = {elem: counted_loop_function(module, f"__enzcc_mpi_mask_{elem}", (_PTR, _PTR, _I32), step_for(elem))
             for elem in (T.f64, T.f32)}

    def body(fn):
        p, w, esize, rank, n = fn.args
        entry, some, dbl, flt, done = (fn.append_block(x) for x in ("entry", "some", "double", "float", "done"))
        b = IRBuilder.at_end(entry)
        b.cond_br(b.icmp("eq", w, ConstantNull(_PTR)), done, some)
        sb = IRBuilder.at_end(some)
        sb.cond_br(sb.icmp("eq", esize, _i32(8)), dbl, flt)
        for block, elem in ((dbl, T.f64), (flt, T.f32)):
            bb = IRBuilder.at_end(block)
            bb.call(loops[elem], [p, w, rank, bb.udiv(n, bb.zext(esize, T.i64))])
            bb.br(done)
        IRBuilder.at_end(done).ret_void()
    return round_function(module, "__enzcc_mpi_mask", T.FunctionType(T.void, (_PTR, _PTR, _I32, _I32, T.i64)), body)


def _guarded(module, call: str, kind: str, params, names, build):
    """The internal function ``name`` (void, ``params``) whose body ``build(e, args)`` runs when every datatype
    carries derivatives (the parameters named ``es*`` are their element sizes); where one does not, it returns
    at once, or stops the program with a message naming the call when a buffer with derivatives (``dbuf``,
    ``dsbuf``, ``drbuf``: shadows, null where there are none) was given."""
    def body(fn):
        args = dict(zip(names, fn.args))
        entry, skip, fail, done, go = (fn.append_block(x) for x in ("entry", "skip", "fail", "done", "go"))
        b = IRBuilder.at_end(entry)
        bad = ConstantInt(T.i1, 0)
        for k, v in args.items():
            if k.startswith("es"):
                bad = b.or_(bad, b.icmp("eq", v, _i32(0)))
        b.cond_br(bad, skip, go)
        sb = IRBuilder.at_end(skip)
        shadowed = ConstantInt(T.i1, 0)
        for k, v in args.items():
            if k in ("dbuf", "dsbuf", "drbuf"):
                shadowed = sb.or_(shadowed, sb.icmp("ne", v, ConstantNull(_PTR)))
        sb.cond_br(shadowed, fail, done)
        fail_at_run_time(module, IRBuilder.at_end(fail), _unsupported_type(call))
        IRBuilder.at_end(done).ret_void()
        g = IRBuilder.at_end(go)
        build(_Emit(g, module), args)
        g.ret_void()
    return round_function(module, f"__enzcc_mpi_{kind}_{call}", T.FunctionType(T.void, tuple(params)), body,
                          names=list(names))


def _unsupported_type(call: str) -> str:
    return (f"{call} on memory with derivatives with a datatype other than MPI_DOUBLE, MPI_FLOAT or a contiguous "
            "type of them is not supported")


# -- the derivative of each call, as one helper per call and direction --------------------------------------

_PTR_PARAMS = {"dbuf", "dsbuf", "drbuf", "dt", "stype", "rtype", "comm", "w"}

#: the parameters of each helper (after the call's name); ``w``: the winners of a minimum or maximum (or null)
_PARAMS = {
    "MPI_Send": ("dbuf", "count", "dt", "peer", "tag", "comm", "es"),
    "MPI_Recv": ("dbuf", "count", "dt", "peer", "tag", "comm", "es"),
    "MPI_Sendrecv": ("dsbuf", "scount", "stype", "dest", "stag", "drbuf", "rcount", "rtype", "src", "rtag", "comm",
                     "ess", "esr"),
    "MPI_Bcast": ("dbuf", "count", "dt", "root", "comm", "es"),
    "MPI_Reduce": ("dsbuf", "drbuf", "count", "dt", "root", "comm", "es", "inplace", "w"),
    "MPI_Allreduce": ("dsbuf", "drbuf", "count", "dt", "comm", "es", "inplace", "w"),
    "MPI_Gather": ("dsbuf", "scount", "stype", "drbuf", "rcount", "rtype", "root", "comm", "ess", "esr"),
    "MPI_Scatter": ("dsbuf", "scount", "stype", "drbuf", "rcount", "rtype", "root", "comm", "ess", "esr"),
    "MPI_Allgather": ("dsbuf", "scount", "stype", "drbuf", "rcount", "rtype", "comm", "ess", "esr"),
}


def _param_type(name: str):
    return _PTR if name in _PTR_PARAMS else T.i1 if name == "inplace" else _I32


def _nonnull(e: _Emit, p):
    return e.b.icmp("ne", p, ConstantNull(_PTR))


def _in_place_ptr(e: _Emit):
    return e.b.inttoptr(_i64(1), _PTR)


def _fwd_point(call: str):
    """Tangent of ``MPI_Send``, ``MPI_Recv``, ``MPI_Bcast``: the same call on the shadow (zeros sent, or a
    scratch buffer received into, where there is none)."""
    def build(e: _Emit, a, tape=None):
        z = e.spare(a["dbuf"], e.nbytes(a["count"], a["dt"]))
        tail = [a["peer"], a["tag"], a["comm"]] if call != "MPI_Bcast" else [a["root"], a["comm"]]
        e.mpi(call, [e.either(a["dbuf"], z), a["count"], a["dt"], *tail]
              + ([ConstantNull(_PTR)] if call == "MPI_Recv" else []))
        e.free(z)
    return build


def _fwd_sendrecv(e: _Emit, a, tape=None):
    zs = e.spare(a["dsbuf"], e.nbytes(a["scount"], a["stype"]))
    zr = e.spare(a["drbuf"], e.nbytes(a["rcount"], a["rtype"]))
    e.mpi("MPI_Sendrecv", [e.either(a["dsbuf"], zs), a["scount"], a["stype"], a["dest"], a["stag"],
                           e.either(a["drbuf"], zr), a["rcount"], a["rtype"], a["src"], a["rtag"], a["comm"],
                           ConstantNull(_PTR)])
    e.free(zs)
    e.free(zr)


def _fwd_reduction(call: str):
    """Tangent of ``MPI_Reduce``/``MPI_Allreduce``: a sum of the tangents (of the winning rank's only, for a
    minimum or maximum: ``w``), in place where the primal was."""
    def build(e: _Emit, a, tape=None):
        b = e.b
        n = e.nbytes(a["count"], a["dt"])
        rank = e.query("rank", a["comm"])
        t, zr = e.calloc(n), e.spare(a["drbuf"], n)
        b.memcpy(t, e.either(a["dsbuf"], t), b.select(_nonnull(e, a["dsbuf"]), n, _i64(0)))
        out = e.either(a["drbuf"], zr)
        inplace, null = a["inplace"], ConstantNull(_PTR)
        b.call(_mask_fn(e.module), [t, b.select(inplace, null, a["w"]), a["es"], rank, n])
        b.call(_mask_fn(e.module), [out, b.select(inplace, a["w"], null), a["es"], rank, n])
        send = b.select(inplace, _in_place_ptr(e), t)
        tail = [a["root"], a["comm"]] if call == "MPI_Reduce" else [a["comm"]]
        e.mpi(call, [send, out, *e.base(n, a["es"]), _global(e.module, SUM), *tail])
        e.free(t)
        e.free(zr)
    return build


def _fwd_collect(call: str):
    """Tangent of ``MPI_Gather``, ``MPI_Scatter``, ``MPI_Allgather``: the same call on the shadows (the root's
    side of a gather or scatter is one block per rank)."""
    def build(e: _Emit, a, tape=None):
        b = e.b
        ranks = b.sext(e.query("size", a["comm"]), T.i64)
        sn, rn = e.nbytes(a["scount"], a["stype"]), e.nbytes(a["rcount"], a["rtype"])
        if call == "MPI_Scatter":
            sn = b.mul(sn, ranks)
        else:
            rn = b.mul(rn, ranks)
        zs, zr = e.spare(a["dsbuf"], sn), e.spare(a["drbuf"], rn)
        tail = [a["root"], a["comm"]] if call != "MPI_Allgather" else [a["comm"]]
        e.mpi(call, [e.either(a["dsbuf"], zs), a["scount"], a["stype"], e.either(a["drbuf"], zr), a["rcount"],
                     a["rtype"], *tail])
        e.free(zs)
        e.free(zr)
    return build


def _not(b: IRBuilder, v):
    return b.xor(v, ConstantInt(T.i1, 1))


def _rev_send(e: _Emit, a, tape):
    """``dbuf += `` what the destination sends back."""
    n = e.nbytes(a["count"], a["dt"])
    t = e.calloc(n)
    e.mpi("MPI_Recv", [t, a["count"], a["dt"], a["peer"], a["tag"], a["comm"], ConstantNull(_PTR)])
    e.add(tape, e.either(a["dbuf"], t), t, n, a["es"], _nonnull(e, a["dbuf"]))
    e.free(t)


def _rev_recv(e: _Emit, a, tape):
    """``dbuf`` sent back to the source, then zero (unless nothing was received: ``MPI_PROC_NULL``)."""
    b = e.b
    n = e.nbytes(a["count"], a["dt"])
    z = e.spare(a["dbuf"], n)
    src = e.either(a["dbuf"], z)
    e.mpi("MPI_Send", [src, a["count"], a["dt"], a["peer"], a["tag"], a["comm"]])
    e.zero(src, n, b.and_(_nonnull(e, a["dbuf"]), b.icmp("ne", a["peer"], _i32(PROC_NULL))))
    e.free(z)


def _rev_sendrecv(e: _Emit, a, tape):
    """Both at once: ``drbuf`` back to the source, the destination's adjoint into ``dsbuf``."""
    b = e.b
    sn, rn = e.nbytes(a["scount"], a["stype"]), e.nbytes(a["rcount"], a["rtype"])
    z, t = e.spare(a["drbuf"], rn), e.calloc(sn)
    out = e.either(a["drbuf"], z)
    e.mpi("MPI_Sendrecv", [out, a["rcount"], a["rtype"], a["src"], a["rtag"], t, a["scount"], a["stype"], a["dest"],
                           a["stag"], a["comm"], ConstantNull(_PTR)])
    e.zero(out, rn, b.and_(_nonnull(e, a["drbuf"]), b.icmp("ne", a["src"], _i32(PROC_NULL))))
    e.add(tape, e.either(a["dsbuf"], t), t, sn, a["ess"], _nonnull(e, a["dsbuf"]))
    e.free(z)
    e.free(t)


def _rev_allreduce(e: _Emit, a, tape):
    """``s`` = the sum of every rank's ``drbuf``; ``dsbuf += s`` (the winners' only, for a minimum or maximum);
    ``drbuf = 0`` (in place: ``drbuf = s``)."""
    b = e.b
    n = e.nbytes(a["count"], a["dt"])
    rank = e.query("rank", a["comm"])
    z, s = e.spare(a["drbuf"], n), e.calloc(n)
    inp = e.either(a["drbuf"], z)
    e.mpi("MPI_Allreduce", [inp, s, *e.base(n, a["es"]), _global(e.module, SUM), a["comm"]])
    b.call(_mask_fn(e.module), [s, a["w"], a["es"], rank, n])
    has_r = _nonnull(e, a["drbuf"])
    b.memcpy(inp, s, b.select(b.and_(a["inplace"], has_r), n, _i64(0)))
    e.zero(inp, n, b.and_(has_r, _not(b, a["inplace"])))
    e.add(tape, e.either(a["dsbuf"], s), s, n, a["es"], _nonnull(e, a["dsbuf"]))
    e.free(z)
    e.free(s)


def _rev_reduce(e: _Emit, a, tape):
    """The root's ``drbuf``, broadcast, added into every rank's ``dsbuf`` (the winners'...); the root's
    ``drbuf = 0`` (in place: unchanged)."""
    b = e.b
    n = e.nbytes(a["count"], a["dt"])
    rank = e.query("rank", a["comm"])
    has_r = b.and_(b.icmp("eq", rank, a["root"]), _nonnull(e, a["drbuf"]))
    s = e.calloc(n)
    b.memcpy(s, e.either(a["drbuf"], s), b.select(has_r, n, _i64(0)))
    e.mpi("MPI_Bcast", [s, a["count"], a["dt"], a["root"], a["comm"]])
    b.call(_mask_fn(e.module), [s, a["w"], a["es"], rank, n])
    dr = e.either(a["drbuf"], s)
    b.memcpy(dr, s, b.select(b.and_(has_r, a["inplace"]), n, _i64(0)))
    e.zero(dr, n, b.and_(has_r, _not(b, a["inplace"])))
    e.add(tape, e.either(a["dsbuf"], s), s, n, a["es"], _nonnull(e, a["dsbuf"]))
    e.free(s)


def _rev_bcast(e: _Emit, a, tape):
    """The root takes the sum of every rank's adjoint (``MPI_Reduce``); the others' are zeroed."""
    b = e.b
    n = e.nbytes(a["count"], a["dt"])
    root = b.icmp("eq", e.query("rank", a["comm"]), a["root"])
    z, s = e.spare(a["dbuf"], n), e.calloc(n)
    inp = e.either(a["dbuf"], z)
    e.mpi("MPI_Reduce", [inp, s, *e.base(n, a["es"]), _global(e.module, SUM), a["root"], a["comm"]])
    has = _nonnull(e, a["dbuf"])
    b.memcpy(inp, s, b.select(b.and_(has, root), n, _i64(0)))
    e.zero(inp, n, b.and_(has, _not(b, root)))
    e.free(z)
    e.free(s)


def _rev_gather(e: _Emit, a, tape):
    """The root's adjoint scattered back and added into each rank's ``dsbuf``; the root's zeroed."""
    b = e.b
    root = b.icmp("eq", e.query("rank", a["comm"]), a["root"])
    ranks = b.sext(e.query("size", a["comm"]), T.i64)
    sn, rn = e.nbytes(a["scount"], a["stype"]), b.mul(e.nbytes(a["rcount"], a["rtype"]), ranks)
    z, t = e.spare(a["drbuf"], b.select(root, rn, _i64(0))), e.calloc(sn)
    src = e.either(a["drbuf"], z)
    e.mpi("MPI_Scatter", [src, a["rcount"], a["rtype"], t, a["scount"], a["stype"], a["root"], a["comm"]])
    e.zero(src, rn, b.and_(root, _nonnull(e, a["drbuf"])))
    e.add(tape, e.either(a["dsbuf"], t), t, sn, a["ess"], _nonnull(e, a["dsbuf"]))
    e.free(z)
    e.free(t)


def _rev_scatter(e: _Emit, a, tape):
    """The adjoints gathered to the root and added into its ``dsbuf``; every rank's ``drbuf`` zeroed."""
    b = e.b
    root = b.icmp("eq", e.query("rank", a["comm"]), a["root"])
    ranks = b.sext(e.query("size", a["comm"]), T.i64)
    sn, rn = b.mul(e.nbytes(a["scount"], a["stype"]), ranks), e.nbytes(a["rcount"], a["rtype"])
    z, t = e.spare(a["drbuf"], rn), e.calloc(b.select(root, sn, _i64(0)))
    inp = e.either(a["drbuf"], z)
    e.mpi("MPI_Gather", [inp, a["rcount"], a["rtype"], t, a["scount"], a["stype"], a["root"], a["comm"]])
    e.zero(inp, rn, _nonnull(e, a["drbuf"]))
    e.add(tape, e.either(a["dsbuf"], t), t, sn, a["ess"], b.and_(root, _nonnull(e, a["dsbuf"])))
    e.free(z)
    e.free(t)


def _rev_allgather(e: _Emit, a, tape):
    """Each rank's block of every rank's adjoint, summed (``MPI_Reduce_scatter_block``), into its ``dsbuf``."""
    b = e.b
    ranks = b.sext(e.query("size", a["comm"]), T.i64)
    block = e.nbytes(a["rcount"], a["rtype"])
    rn = b.mul(block, ranks)
    z, t = e.spare(a["drbuf"], rn), e.calloc(block)
    inp = e.either(a["drbuf"], z)
    e.mpi("MPI_Reduce_scatter_block", [inp, t, *e.base(block, a["esr"]), _global(e.module, SUM), a["comm"]])
    e.zero(inp, rn, _nonnull(e, a["drbuf"]))
    e.add(tape, e.either(a["dsbuf"], t), t, block, a["ess"], _nonnull(e, a["dsbuf"]))
    e.free(z)
    e.free(t)


#: call -> the builder of its tangent and of its reverse: ``build(e, args, tape)``
_BODIES = {
    "MPI_Send": (_fwd_point("MPI_Send"), _rev_send),
    "MPI_Recv": (_fwd_point("MPI_Recv"), _rev_recv),
    "MPI_Sendrecv": (_fwd_sendrecv, _rev_sendrecv),
    "MPI_Bcast": (_fwd_point("MPI_Bcast"), _rev_bcast),
    "MPI_Reduce": (_fwd_reduction("MPI_Reduce"), _rev_reduce),
    "MPI_Allreduce": (_fwd_reduction("MPI_Allreduce"), _rev_allreduce),
    "MPI_Gather": (_fwd_collect("MPI_Gather"), _rev_gather),
    "MPI_Scatter": (_fwd_collect("MPI_Scatter"), _rev_scatter),
    "MPI_Allgather": (_fwd_collect("MPI_Allgather"), _rev_allgather),
}


def _helper(module, call: str, forward: bool, tape=None):
    """The internal function that makes the tangent (``forward``) or the reverse of ``call`` (``_PARAMS``)."""
    names = _PARAMS[call]
    body = _BODIES[call][0 if forward else 1]
    return _guarded(module, call, "fwd" if forward else "rev", [_param_type(n) for n in names], names,
                    lambda e, a: body(e, a, tape))


def _winners_of_fn(module):
    """``winners_of(x, count, dt, op, comm, es, wanted) -> w``: for a minimum or maximum (``wanted``), which rank
    gave each element of the result (the lowest on a tie), as a heap array of i32 the caller frees; null when
    not ``wanted`` or when the datatype carries nothing (``es`` 0). Every rank calls it with the same ``wanted``
    (two collectives)."""
    def body(fn):
        x, count, dt, op, comm, es, wanted = fn.args
        entry, go, none = fn.append_block("entry"), fn.append_block("go"), fn.append_block("none")
        b = IRBuilder.at_end(entry)
        b.cond_br(b.and_(wanted, b.icmp("ne", es, _i32(0))), go, none)
        IRBuilder.at_end(none).ret(ConstantNull(_PTR))
        g = IRBuilder.at_end(go)
        e = _Emit(g, module)
        n = e.nbytes(count, dt)
        elems = g.udiv(n, g.zext(es, T.i64))
        y = e.calloc(n)
        e.mpi("MPI_Allreduce", [x, y, count, dt, op, comm])
        w = e.calloc(g.mul(elems, _i64(4)))
        g.call(_winners_fn(module), [x, y, w, es, e.query("rank", comm), e.query("size", comm), n])
        e.mpi("MPI_Allreduce", [_in_place_ptr(e), w, g.trunc(elems, _I32), _global(module, "ompi_mpi_int"),
                                _global(module, MIN), comm])
        e.free(y)
        g.ret(w)
    return round_function(module, "__enzcc_mpi_winners_of",
                          T.FunctionType(_PTR, (_PTR, _I32, _PTR, _PTR, _PTR, _I32, T.i1)), body)


# -- requests: records of the non-blocking calls, taken by the waits -----------------------------------------

#: a record: the request's handle, the call's kind, the shadow buffer (or null), count, datatype, peer, tag,
#: communicator, a temporary, the derivative's own request, the bytes, the element size
_RECORD = T.StructType((_PTR, _I32, _PTR, _I32, _PTR, _I32, _I32, _PTR, _PTR, _PTR, T.i64, _I32))
HANDLE, KIND, BUF, COUNT, DT, PEER, TAG, COMM, TMP, REQ, NBYTES, ES = range(12)
#: kinds: forward mode's send and receive (posted with the primal), reverse mode's (posted in the reverse sweep)
FWD_SEND, FWD_RECV, REV_SEND, REV_RECV = range(4)


def _table(module):
    """The globals of this round's table of records: the array, its length, its capacity."""
    names = []
    for what, ty in (("records", _PTR), ("nrecords", T.i64), ("caprecords", T.i64)):
        name = f"__enzcc_mpi_{what}"
        if name not in module.globals:
            module.add_global(name, ty, linkage="internal")
        names.append(module.global_ref(name))
    return names


def _field(b: IRBuilder, rec, k: int):
    return b.struct_gep(_RECORD, rec, k)


def _note_fn(module):
    """``note(reqp, kind, dbuf, count, dt, peer, tag, comm, es) -> record``, after an ``MPI_Isend`` or
    ``MPI_Irecv`` that wrote its request to ``reqp``: appends a record of the call to the table; forward mode's
    kinds post the derivative's own non-blocking call now, on the shadow (zeros sent, or a scratch buffer
    received into, where there is none). Null where the datatype carries nothing (a buffer with derivatives
    then stops the program)."""
    def body(fn):
        reqp, kind, dbuf, count, dt, peer, tag, comm, es = fn.args
        entry, skip, fail, none, go, post, send, recv, push, grow, add = (fn.append_block(x) for x in (
            "entry", "skip", "fail", "none", "go", "post", "send", "recv", "push", "grow", "add"))
        b = IRBuilder.at_end(entry)
        b.cond_br(b.icmp("eq", es, _i32(0)), skip, go)
        sb = IRBuilder.at_end(skip)
        sb.cond_br(sb.icmp("ne", dbuf, ConstantNull(_PTR)), fail, none)
        fail_at_run_time(module, IRBuilder.at_end(fail), _unsupported_type("MPI_Isend or MPI_Irecv"))
        IRBuilder.at_end(none).ret(ConstantNull(_PTR))
        g = IRBuilder.at_end(go)
        e = _Emit(g, module)
        rec = e.calloc(_i64(module.data_layout.store_size(_RECORD)))
        n = e.nbytes(count, dt)
        for k, v in ((HANDLE, g.load(_PTR, reqp)), (KIND, kind), (BUF, dbuf), (COUNT, count), (DT, dt),
                     (PEER, peer), (TAG, tag), (COMM, comm), (NBYTES, n), (ES, es),
                     (REQ, _global(module, "ompi_request_null"))):
            g.store(v, _field(g, rec, k))
        g.cond_br(g.icmp("ult", kind, _i32(REV_SEND)), post, push)
        pb = IRBuilder.at_end(post)
        t = _Emit(pb, module).calloc(n)
        pb.store(t, _field(pb, rec, TMP))
        pb.cond_br(pb.icmp("eq", kind, _i32(FWD_SEND)), send, recv)
        for block, name in ((send, "MPI_Isend"), (recv, "MPI_Irecv")):
            xb = IRBuilder.at_end(block)
            xe = _Emit(xb, module)
            xe.mpi(name, [xe.either(dbuf, t), count, dt, peer, tag, comm, _field(xb, rec, REQ)])
            xb.br(push)
        arr, length, cap = _table(module)
        ub = IRBuilder.at_end(push)
        ln, cp = ub.load(T.i64, length), ub.load(T.i64, cap)
        ub.cond_br(ub.icmp("eq", ln, cp), grow, add)
        gb = IRBuilder.at_end(grow)
        bigger = gb.add(gb.mul(cp, _i64(2)), _i64(16))
        moved = _Emit(gb, module).libc("realloc", _PTR, (_PTR, T.i64), [gb.load(_PTR, arr), gb.mul(bigger, _i64(8))])
        gb.store(moved, arr)
        gb.store(bigger, cap)
        gb.br(add)
        ab = IRBuilder.at_end(add)
        ab.store(rec, ab.gep(_PTR, ab.load(_PTR, arr), [ln]))
        ab.store(ab.add(ln, _i64(1)), length)
        ab.ret(rec)
    return round_function(module, "__enzcc_mpi_note", T.FunctionType(
        _PTR, (_PTR, _I32, _PTR, _I32, _PTR, _I32, _I32, _PTR, _I32)), body)


def _match_fn(module):
    """``match(rec, n, reqs) -> i1``: whether the record (or null) is that of one of the requests ``reqs[0..n)``."""
    def step(b, args, i):
        handle, reqs, acc = args
        same = b.icmp("eq", b.load(_PTR, b.gep(_PTR, reqs, [i])), handle)
        b.store(b.or_(b.load(T.i1, acc), same), acc)
    loop = counted_loop_function(module, "__enzcc_mpi_match_loop", (_PTR, _PTR, _PTR), step)

    def body(fn):
        rec, n, reqs = fn.args
        entry, go, no = fn.append_block("entry"), fn.append_block("go"), fn.append_block("no")
        b = IRBuilder.at_end(entry)
        acc = b.alloca(T.i1)
        b.cond_br(b.icmp("eq", rec, ConstantNull(_PTR)), no, go)
        IRBuilder.at_end(no).ret(ConstantInt(T.i1, 0))
        g = IRBuilder.at_end(go)
        g.store(ConstantInt(T.i1, 0), acc)
        g.call(loop, [g.load(_PTR, _field(g, rec, HANDLE)), reqs, acc, g.sext(n, T.i64)])
        g.ret(g.load(T.i1, acc))
    return round_function(module, "__enzcc_mpi_match", T.FunctionType(T.i1, (_PTR, _I32, _PTR)), body)


def _take_fn(module):
    """``take(n, reqs) -> recs``, before a wait on ``reqs[0..n)``: the records of those requests, removed from
    the table, in the order their calls were made, in a null-terminated heap array of ``n + 1``."""
    def step(b, args, i):
        arr, out, n, reqs, kslot = args
        slot = b.gep(_PTR, arr, [i])
        rec = b.load(_PTR, slot)
        found = b.call(_match_fn(module), [rec, n, reqs])
        k = b.load(T.i64, kslot)
        b.store(rec, b.gep(_PTR, out, [k]))
        b.store(b.add(k, b.zext(found, T.i64)), kslot)
        b.store(b.select(found, ConstantNull(_PTR), rec), slot)
    loop = counted_loop_function(module, "__enzcc_mpi_take_loop", (_PTR, _PTR, _I32, _PTR, _PTR), step)

    def body(fn):
        n, reqs = fn.args
        b = IRBuilder.at_end(fn.append_block("entry"))
        e = _Emit(b, module)
        kslot = b.alloca(T.i64)
        b.store(_i64(0), kslot)
        out = e.calloc(b.mul(b.add(b.sext(n, T.i64), _i64(1)), _i64(8)))
        arr, length, _ = _table(module)
        ln = b.load(T.i64, length)
        b.call(loop, [b.load(_PTR, arr), out, n, reqs, kslot, ln])
        b.store(ConstantNull(_PTR), b.gep(_PTR, out, [b.load(T.i64, kslot)]))
        # (the table's tail of taken records is dropped: a record is taken once, so trailing nulls are free)
        b.call(_trim_fn(module), [])
        b.ret(out)
    return round_function(module, "__enzcc_mpi_take", T.FunctionType(_PTR, (_I32, _PTR)), body)


def _trim_fn(module, table=None):
    """``trim()``: a table's length (the request records', or ``table``: (array, length) globals) without its
    trailing taken (null) slots."""
    def body(fn):
        entry, head, check, dec, done = (fn.append_block(x) for x in ("entry", "head", "check", "dec", "done"))
        arr, length = table if table is not None else _table(module)[:2]
        IRBuilder.at_end(entry).br(head)
        h = IRBuilder.at_end(head)
        ln = h.load(T.i64, length)
        h.cond_br(h.icmp("eq", ln, _i64(0)), done, check)
        c = IRBuilder.at_end(check)
        last = c.load(_PTR, c.gep(_PTR, c.load(_PTR, arr), [c.sub(ln, _i64(1))]))
        c.cond_br(c.icmp("eq", last, ConstantNull(_PTR)), dec, done)
        d = IRBuilder.at_end(dec)
        d.store(d.sub(ln, _i64(1)), length)
        d.br(head)
        IRBuilder.at_end(done).ret_void()
    name = "__enzcc_mpi_trim" if table is None else "__enzcc_mpi_trim_deferred"
    return round_function(module, name, T.FunctionType(T.void, ()), body)


def _each_record_fn(module, name: str, one):
    """``name(n, recs)``: ``one`` (a function of one record) on each record of a null-terminated array of at most
    ``n`` (a null record is skipped), then the array is freed."""
    def step(b, args, i):
        recs, = args
        b.call(one, [b.load(_PTR, b.gep(_PTR, recs, [i]))])
    loop = counted_loop_function(module, f"{name}_loop", (_PTR,), step)

    def body(fn):
        n, recs = fn.args
        b = IRBuilder.at_end(fn.append_block("entry"))
        b.call(loop, [recs, b.sext(n, T.i64)])
        _Emit(b, module).free(recs)
        b.ret_void()
    return round_function(module, name, T.FunctionType(T.void, (_I32, _PTR)), body)


def _record_fn(module, name: str, build):
    """``name(rec)``: ``build(builder, rec)`` on a record that is not null."""
    def body(fn):
        rec, = fn.args
        entry, go, done = fn.append_block("entry"), fn.append_block("go"), fn.append_block("done")
        b = IRBuilder.at_end(entry)
        b.cond_br(b.icmp("eq", rec, ConstantNull(_PTR)), done, go)
        g = IRBuilder.at_end(go)
        build(g, rec)
        g.br(done)
        IRBuilder.at_end(done).ret_void()
    return round_function(module, name, T.FunctionType(T.void, (_PTR,)), body)


def _fields(b: IRBuilder, rec):
    tys = _RECORD.elements
    return [b.load(tys[k], _field(b, rec, k)) for k in range(len(tys))]


def _complete_forward_fn(module):
    """Forward mode, after a wait: each record's own request waited for, its scratch buffer and itself freed."""
    def build(b, rec):
        e = _Emit(b, module)
        e.mpi("MPI_Wait", [_field(b, rec, REQ), ConstantNull(_PTR)])
        e.free(b.load(_PTR, _field(b, rec, TMP)))
        e.free(rec)
    one = _record_fn(module, "__enzcc_mpi_complete_one", build)
    return _each_record_fn(module, "__enzcc_mpi_complete", one)


def _post_adjoints_fn(module):
    """Reverse of a wait: each record's adjoint operation posted (an ``MPI_Irecv`` of the adjoint of what was
    sent into a zeroed temporary; an ``MPI_Isend`` of the shadow of what was received, zeros where none)."""
    def build(b, rec):
        e = _Emit(b, module)
        f = _fields(b, rec)
        t = e.calloc(f[NBYTES])
        b.store(t, _field(b, rec, TMP))
        is_send = b.icmp("eq", f[KIND], _i32(REV_SEND))
        args = [f[COUNT], f[DT], f[PEER], f[TAG], f[COMM], _field(b, rec, REQ)]
        post_recv, post_send, done = (b.function.append_block(x) for x in ("irecv", "isend", "posted"))
        b.cond_br(is_send, post_recv, post_send)
        r = IRBuilder.at_end(post_recv)
        _Emit(r, module).mpi("MPI_Irecv", [t, *args])
        r.br(done)
        s = IRBuilder.at_end(post_send)
        se = _Emit(s, module)
        se.mpi("MPI_Isend", [se.either(f[BUF], t), *args])
        s.br(done)
        b.position_at_end(done)
    one = _record_fn(module, "__enzcc_mpi_post_adjoint", build)
    return _each_record_fn(module, "__enzcc_mpi_post_adjoints", one)


def _finish_fn(module, tape):
    """Reverse of ``MPI_Isend``/``MPI_Irecv``: its adjoint operation waited for; a send's adjoint added into the
    shadow, a receive's shadow zeroed (not for ``MPI_PROC_NULL``, which wrote nothing); the record freed."""
    def build(b, rec):
        e = _Emit(b, module)
        never = b.icmp("eq", b.load(_PTR, _field(b, rec, TMP)), ConstantNull(_PTR))
        fail_call_at_run_time_if(module, b, never, "an MPI_Isend or MPI_Irecv of a differentiated function whose "
                                 "request no MPI_Wait or MPI_Waitall of that function completes is not supported")
        e.mpi("MPI_Wait", [_field(b, rec, REQ), ConstantNull(_PTR)])
        f = _fields(b, rec)
        has = _nonnull(e, f[BUF])
        dst = e.either(f[BUF], f[TMP])
        is_send = b.icmp("eq", f[KIND], _i32(REV_SEND))
        e.add(tape, dst, f[TMP], f[NBYTES], f[ES], b.and_(has, is_send))
        e.zero(dst, f[NBYTES], b.and_(b.and_(has, b.xor(is_send, ConstantInt(T.i1, 1))),
                                       b.icmp("ne", f[PEER], _i32(PROC_NULL))))
        e.free(f[TMP])
        e.free(rec)
    return _record_fn(module, "__enzcc_mpi_finish", build)


# -- what a call's datatypes and operation carry -------------------------------------------------------------

def _const_esize(dt):
    """A datatype known at compile time: its element bytes (0: carries nothing); None when only the run time
    knows (a derived type)."""
    if isinstance(dt, GlobalRef):
        if dt.symbol in FLOAT_TYPES:
            return FLOAT_TYPES[dt.symbol]
        if dt.symbol.startswith("ompi_mpi_"):
            return 0
    return None


def _buffers(call: Call) -> list[tuple[str, str]]:
    """(buffer, datatype) parameter names of a call."""
    sig = SIGNATURES[call.callee_name]
    if "buf" in sig:
        return [("buf", "type")]
    if "type" in sig:  # reductions: one datatype for both
        return [("sbuf", "type"), ("rbuf", "type")]
    return [("sbuf", "stype"), ("rbuf", "rtype")]


def _args(call: Call) -> dict:
    return dict(zip(SIGNATURES[call.callee_name], call.args))


def _carries(mode, call: Call) -> bool:
    """Whether the call carries derivatives: a datatype that may hold floats. A predefined datatype that holds
    none on memory with derivatives that the function reads or writes as floats is refused."""
    a = _args(call)
    carries = False
    for buf, dt in _buffers(call):
        size = _const_esize(a[dt])
        if size == 0:
            p = a[buf]
            if not is_in_place(p) and not isinstance(p, ConstantNull) and mode.activity.is_active_ptr(p) and \
                    any(isinstance(k, T.FloatType) for k in mode.memtypes.access_kinds(p)):
                raise ad_error(_unsupported_type(call.callee_name) + f" (here {_mpi_name(a[dt].symbol)})", call)
        else:
            carries = True
    return carries


def _mpi_name(symbol: str) -> str:
    """``MPI_INT`` for Open MPI's ``ompi_mpi_int``."""
    return symbol[len("ompi_"):].upper() if symbol.startswith("ompi_mpi_") else symbol


def _check_mode(mode, call: Call) -> None:
    if getattr(mode, "width", 1) > 1:
        raise ad_error(f"{call.callee_name} in vector mode (enzyme_width) is not supported", call)
    if getattr(mode, "parallel", False) or getattr(mode, "concurrent", False):
        raise ad_error(f"{call.callee_name} in an OpenMP parallel region is not supported", call)


def _check_peer(b: IRBuilder, call: Call, peer, tag) -> None:
    """A receive whose derivative must go back to (or come from) the rank that sent: MPI_ANY_SOURCE and
    MPI_ANY_TAG are refused (at compile time where they are constants, else when the program runs)."""
    message = (f"{call.callee_name} with MPI_ANY_SOURCE or MPI_ANY_TAG in a differentiated function is not "
               "supported (name the source and the tag)")
    consts = [v for v in (peer, tag) if isinstance(v, ConstantInt)]
    if any(v.value == ANY_SOURCE for v in consts):
        raise ad_error(message, call)
    if len(consts) < 2:
        bad = b.or_(b.icmp("eq", peer, _i32(ANY_SOURCE)), b.icmp("eq", tag, _i32(ANY_TAG)))
        fail_call_at_run_time_if(b.module, b, bad, message)


def _op_kind(b: IRBuilder, call: Call, op):
    """``(is_minmax, check)`` of a reduction's operation (an i1 value, or a bool when known): sum, minimum or
    maximum; another operation is refused (at compile time where it is a constant)."""
    if isinstance(op, GlobalRef):
        if op.symbol == SUM:
            return False
        if op.symbol in (MIN, MAX):
            return True
        raise ad_error(f"{call.callee_name} with an operation other than MPI_SUM, MPI_MIN or MPI_MAX on data with "
                       f"derivatives is not supported (here {_mpi_name(op.symbol.replace('op_', ''))})", call)
    module = b.module
    is_op = [b.icmp("eq", op, _global(module, k)) for k in (SUM, MIN, MAX)]
    fail_call_at_run_time_if(module, b, b.xor(b.or_(b.or_(is_op[0], is_op[1]), is_op[2]), ConstantInt(T.i1, 1)),
                             f"{call.callee_name} with an operation other than MPI_SUM, MPI_MIN or MPI_MAX on data "
                             "with derivatives is not supported")
    return b.or_(is_op[1], is_op[2])


def _esize(b: IRBuilder, dt):
    size = _const_esize(dt)
    return _i32(size) if size is not None else b.call(_esize_fn(b.module), [dt])


def _winners(b: IRBuilder, call: Call, a: dict, values):
    """Before a reduction (``values``: the primal arguments where they are used): the winners of a minimum or
    maximum, or null."""
    minmax = _op_kind(b, call, values["op"])
    if minmax is False:
        return ConstantNull(_PTR)
    x = a["sbuf"]
    x = values["rbuf"] if is_in_place(x) else values["sbuf"]
    wanted = ConstantInt(T.i1, 1) if minmax is True else minmax
    return b.call(_winners_of_fn(b.module), [x, values["count"], values["type"], values["op"], values["comm"],
                                             _esize(b, values["type"]), wanted])


def _helper_args(b: IRBuilder, call: Call, values: dict, shadow, w=None) -> list:
    """The arguments of the call's helper: ``values`` the primal arguments, ``shadow(name)`` a buffer's shadow or
    null."""
    name = call.callee_name
    out = []
    for p in _PARAMS[name]:
        if p in ("dbuf", "dsbuf", "drbuf"):
            out.append(shadow(p[1:]))
        elif p in ("es", "ess", "esr"):
            out.append(_esize(b, values[{"es": "type", "ess": "stype", "esr": "rtype"}[p]]))
        elif p == "inplace":
            out.append(ConstantInt(T.i1, int(is_in_place(_args(call)["sbuf"]))))
        elif p == "w":
            out.append(w)
        else:
            out.append(values[{"dt": "type", "peer": "peer"}.get(p, p)])
    return out


def _shadow_in(mode, call: Call, get):
    """``shadow(name)``: the shadow of buffer ``name`` (``get(pointer)``), or null where it has none."""
    a = _args(call)

    def shadow(name):
        p = a[name]
        if is_in_place(p) or isinstance(p, ConstantNull) or not mode.activity.is_active_ptr(p):
            return ConstantNull(_PTR)
        return get(p)
    return shadow


# -- forward mode ---------------------------------------------------------------------------------------------

def _forward(mode, call: Call) -> bool:
    name = call.callee_name
    _check_mode(mode, call)
    a = _args(call)
    module = mode.module
    if name in ("MPI_Wait", "MPI_Waitall"):
        n = a.get("n", _i32(1))
        recs = IRBuilder.before(call).call(_take_fn(module), [n, a.get("reqs", a.get("req"))])
        IRBuilder.after(call).call(_complete_forward_fn(module), [n, recs])
        return True
    if not _carries(mode, call):
        return True
    shadow = _shadow_in(mode, call, lambda p: mode.shadows.of(p, call))
    if name in ("MPI_Isend", "MPI_Irecv"):
        b = IRBuilder.after(call)
        if name == "MPI_Irecv":
            _check_peer(b, call, a["peer"], a["tag"])
        b.call(_note_fn(module), [a["req"], _i32(FWD_SEND if name == "MPI_Isend" else FWD_RECV), shadow("buf"),
                                  a["count"], a["type"], a["peer"], a["tag"], a["comm"], _esize(b, a["type"])])
        return True
    w = None
    if name in ("MPI_Reduce", "MPI_Allreduce"):
        w = _winners(IRBuilder.before(call), call, a, a)
    b = IRBuilder.after(call)
    if name in ("MPI_Recv", "MPI_Sendrecv"):
        _check_peer(b, call, a.get("peer", a.get("src")), a.get("tag", a.get("rtag")))
    b.call(_helper(module, name, forward=True), _helper_args(b, call, a, shadow, w))
    if w is not None and not isinstance(w, ConstantNull):
        _Emit(b, module).free(w)
    return True


# -- reverse mode ---------------------------------------------------------------------------------------------

def _augment(mode, call: Call):
    """Forward sweep: the records of non-blocking calls, the records a wait takes, the winners of a minimum or
    maximum; None where the reverse needs only the call's arguments."""
    name = call.callee_name
    _check_mode(mode, call)
    a = _args(call)
    module = mode.module
    if name in ("MPI_Wait", "MPI_Waitall"):
        recs = IRBuilder.before(call).call(_take_fn(module), [a.get("n", _i32(1)), a.get("reqs", a.get("req"))])
        return call, recs, [recs]
    if not _carries(mode, call):
        return None
    if name in ("MPI_Isend", "MPI_Irecv"):
        b = IRBuilder.after(call)
        if name == "MPI_Irecv":
            _check_peer(b, call, a["peer"], a["tag"])
        shadow = _shadow_in(mode, call, lambda p: mode.shadows.of(p, call))
        rec = b.call(_note_fn(module), [a["req"], _i32(REV_SEND if name == "MPI_Isend" else REV_RECV),
                                        shadow("buf"), a["count"], a["type"], a["peer"], a["tag"], a["comm"],
                                        _esize(b, a["type"])])
        return call, rec, [rec]
    if name in ("MPI_Reduce", "MPI_Allreduce"):
        w = _winners(IRBuilder.before(call), call, a, a)
        if not isinstance(w, ConstantNull):
            return call, w, [w]
    return None


def _reverse(mode, call: Call, entry, block, b: IRBuilder) -> bool:
    name = call.callee_name
    _check_mode(mode, call)
    module = mode.module
    a = _args(call)
    if name in ("MPI_Wait", "MPI_Waitall"):
        if entry is None:
            raise ad_error(f"{name} here is not supported in reverse mode", call)
        n = mode._primal(a.get("n", _i32(1)), block, b)
        b.call(_post_adjoints_fn(module), [n, mode._primal(entry, block, b)])
        return True
    if not _carries(mode, call):
        return True
    if name in ("MPI_Isend", "MPI_Irecv"):
        if entry is None:
            raise ad_error(f"{name} here is not supported in reverse mode", call)
        b.call(_finish_fn(module, mode.tape), [mode._primal(entry, block, b)])
        return True
    values = {k: (v if is_in_place(v) else mode._primal(v, block, b)) for k, v in a.items()}
    if name in ("MPI_Recv", "MPI_Sendrecv"):
        _check_peer(b, call, values.get("peer", values.get("src")), values.get("tag", values.get("rtag")))
    shadow = _shadow_in(mode, call, lambda p: mode._shadow(p, block, b, call))
    w = mode._primal(entry, block, b) if entry is not None else ConstantNull(_PTR)
    if name in ("MPI_Reduce", "MPI_Allreduce") and entry is None:
        _op_kind(b, call, values["op"])  # (refuses other operations)
    b.call(_helper(module, name, forward=False, tape=mode.tape), _helper_args(b, call, values, shadow, w))
    if entry is not None:
        _Emit(b, module).free(w)
    return True


#: calls refused in a differentiated function: their requests would escape the records the waits take
REFUSED = ("MPI_Test", "MPI_Testall", "MPI_Testany", "MPI_Testsome", "MPI_Waitany", "MPI_Waitsome",
           "MPI_Request_free", "MPI_Cancel", "MPI_Start", "MPI_Startall", "MPI_Send_init", "MPI_Recv_init")


def _refuse(fn, call: Call, forward: bool) -> None:
    name = call.callee_name or ""
    if name in REFUSED:
        raise ad_error(f"{name} in a differentiated function is not supported (complete requests with MPI_Wait "
                       "or MPI_Waitall)", call)


# -- derived datatypes freed in a function differentiated in reverse mode ------------------------------------

def _deferred(module):
    """The globals of this round's list of datatypes whose release waits for the reverse sweep: the array, its
    length."""
    refs = []
    for what, ty in (("deferred_types", _PTR), ("ndeferred_types", T.i64)):
        name = f"__enzcc_mpi_{what}"
        if name not in module.globals:
            module.add_global(name, ty, linkage="internal")
        refs.append(module.global_ref(name))
    return refs


def _defer_fn(module):
    """``defer(slot)``, in place of ``MPI_Type_free(slot)`` in the forward sweep: the handle is noted (the
    reverse sweep still sends messages of its type) and the slot set to ``MPI_DATATYPE_NULL``, as the call
    would have. (The list grows by one slot here and shrinks at the release: :func:`_release_deferred_fn`.)"""
    def body(fn):
        slot, = fn.args
        b = IRBuilder.at_end(fn.append_block("entry"))
        arr, length = _deferred(module)
        n = b.load(T.i64, length)
        grown = _Emit(b, module).libc("realloc", _PTR, (_PTR, T.i64),
                                      [b.load(_PTR, arr), b.mul(b.add(n, _i64(1)), _i64(8))])
        b.store(grown, arr)
        b.store(b.load(_PTR, slot), b.gep(_PTR, grown, [n]))
        b.store(b.add(n, _i64(1)), length)
        b.store(_global(module, "ompi_mpi_datatype_null"), slot)
        b.ret_void()
    return round_function(module, "__enzcc_mpi_defer_type_free", T.FunctionType(T.void, (_PTR,)), body)


def _release_deferred_fn(module):
    """``release(handle)``, at the reverse of the ``MPI_Type_commit`` that made it: ``MPI_Type_free`` if the
    forward sweep deferred its release (once)."""
    def step(b, args, i):
        arr, handle, slot = args
        at = b.gep(_PTR, arr, [i])
        here = b.load(_PTR, at)
        same = b.icmp("eq", here, handle)
        b.store(b.select(same, ConstantNull(_PTR), here), at)
        b.call(_release_fn(module), [slot, b.zext(same, _I32)])
    loop = counted_loop_function(module, "__enzcc_mpi_release_deferred_loop", (_PTR, _PTR, _PTR), step)

    def body(fn):
        handle, = fn.args
        b = IRBuilder.at_end(fn.append_block("entry"))
        slot = b.alloca(_PTR)
        b.store(handle, slot)
        arr, length = _deferred(module)
        b.call(loop, [b.load(_PTR, arr), handle, slot, b.load(T.i64, length)])
        b.call(_trim_fn(module, (arr, length)), [])
        b.ret_void()
    return round_function(module, "__enzcc_mpi_release_deferred", T.FunctionType(T.void, (_PTR,)), body)


def _augment_type_free(mode, call: Call):
    """Forward sweep: the release is deferred (:func:`_defer_fn`) to the reverse of the type's commit."""
    anchor = IRBuilder.before(call).call(_defer_fn(mode.module), [call.args[0]])
    call.erase()
    return anchor, None, []


def _augment_type_commit(mode, call: Call):
    handle = IRBuilder.after(call).load(_PTR, call.args[0])
    return call, handle, [handle]


def _reverse_type_commit(mode, call: Call, entry, block, b: IRBuilder) -> bool:
    if entry is not None:
        b.call(_release_deferred_fn(mode.module), [mode._primal(entry, block, b)])
    return True


_RULE = CallRule("mpi", passes_arguments=True, forward=_forward, augment=_augment, reverse=_reverse)
register(_RULE, names=tuple(SIGNATURES))
register(CallRule("mpi", inactive=True), names=INACTIVE)
register(CallRule("mpi", inactive=True, augment=_augment_type_free, reverse=lambda *a: True), names=("MPI_Type_free",))
register(CallRule("mpi", inactive=True, augment=_augment_type_commit, reverse=_reverse_type_commit),
         names=("MPI_Type_commit",))
register_prepared_check(_refuse)

__all__ = ["FLOAT_TYPES", "INACTIVE", "REFUSED", "SIGNATURES", "is_in_place"]
