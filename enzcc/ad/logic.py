"""The cache of derived functions (the role of Enzyme's EnzymeLogic).

A derived function is keyed by (function, what it is, the activity of each argument, whether the return is
active): the combined gradient or the tangent function an ``__enzyme_*`` call asks for, and the functions
that calls inside differentiated code use when the callee is not inlined (recursion): its forward derivative,
and its augmented primal / reverse pair. Each is created on first request, registered before its body is
built (so a recursive function finds itself), and shared by every call with the same key.
"""

from __future__ import annotations

from enzcc.ad.api import ArgSpec, DiffCall
from enzcc.ad.hints import hints_of
from enzcc.ir import types as T


class DerivedFunctions:
    """Derived functions of one module, made on demand."""

    def __init__(self, module, prepared: dict[str, str] | None = None):
        self.module = module
        self.prepared = prepared or {}
        """Function name -> its prepared copy (inlined and simplified) made for an ``__enzyme_*`` call."""
        self.cache: dict[tuple, object] = {}
        """Key -> the derived function (or pair of functions)."""
        self.scratch: list[str] = []
        """Functions made only to build derivatives from (deleted by :meth:`cleanup`)."""
        self.split_makers: dict[tuple, object] = {}
        """Key of a split pair -> the combined function it was cut from (for more variants)."""
        self.pair_keys: dict[str, tuple] = {}
        """Name of a split pair's reverse function -> the pair's key."""
        self.runtime_activity = False
        """While the derivative of an ``__enzyme_*`` call with ``enzyme_runtime_activity`` is built: the functions
        its calls need are made with runtime activity too (and cached apart from the others)."""

    def _ra_key(self) -> tuple:
        """What runtime activity adds to a cache key (nothing without it: the same names as before)."""
        return ("runtime-activity",) if self.runtime_activity else ()

    def body_of(self, fn):
        name = self.prepared.get(fn.name)
        return self.module.functions[name] if name else fn

    # -- what ``__enzyme_*`` calls ask for ----------------------------------------------------------

    def for_call(self, dc: DiffCall):
        """The function replacing one ``__enzyme_autodiff`` / ``__enzyme_fwddiff`` call."""
        key = (dc.mode, dc.fn.name, tuple(s.kind for s in dc.args), dc.primal_return, dc.active_return, dc.width) + \
            (("runtime-activity",) if dc.runtime_activity else ())
        G = self.cache.get(key)
        if G is None:
            outer, self.runtime_activity = self.runtime_activity, dc.runtime_activity
            try:
                G = self._make_for_call(dc, key)
            finally:
                self.runtime_activity = outer
        return G

    def _make_for_call(self, dc: DiffCall, key: tuple):
        """Build the function for :meth:`for_call` (registered under ``key`` before its body is made, so that a
        recursive function finds itself)."""
        from enzcc.ad.forward import ForwardMode
        from enzcc.ad.reverse import ReverseMode

        hints = hints_of(self.module)
        registered = hints.gradient if dc.mode == "reverse" else hints.derivative
        # a function with a registered derivative: differentiate a call to it, which uses that derivative
        # (with only a split-mode one registered, that call is refused with a message)
        body = self.wrapper(dc.fn) if dc.fn.name in registered or dc.fn.name in hints.splitderivative \
            else self.body_of(dc.fn)
        if dc.mode == "reverse":
            maker = ReverseMode(dc, self.module, body, logic=self, active_return=dc.active_return)
        else:
            maker = ForwardMode(dc, self.module, body, logic=self, return_primal=dc.primal_return)
        self.cache[key] = maker.G
        return maker.build()

    def wrapper(self, fn):
        """A function that only calls ``fn`` (removed by :meth:`cleanup`)."""
        from enzcc.ir.builder import IRBuilder
        from enzcc.ir.function import Function

        w = Function(self.module.unique_function_name(f"__enzcc_call_{fn.name}"), fn.function_type,
                     [a.name for a in fn.args])
        w.linkage = "internal"
        self.module.add_function(w)
        b = IRBuilder.at_end(w.append_block("entry"))
        r = b.call(fn, list(w.args))
        b.ret_void() if isinstance(fn.return_type, T.VoidType) else b.ret(r)
        self.scratch.append(w.name)
        return w

    def cleanup(self) -> None:
        """Remove the functions made only to build derivatives from."""
        for name in self.scratch:
            del self.module.functions[name]
        self.scratch.clear()

    # -- what calls inside differentiated code ask for ---------------------------------------------

    def forward_of_call(self, call, callee, kinds: tuple[str, ...], args=None, width: int = 1,
                        shadow_return: bool = False):
        """``callee``'s forward derivative for a call with argument activity ``kinds``: it takes each argument
        followed by its tangent (``dup``; vector mode: ``width`` tangents) and returns ``{result, tangent...}``
        for a float result, the result otherwise. ``args``: the values ``callee``'s parameters get, when they
        are not the call's arguments (a function the call passes on, as OpenMP's ``__kmpc_fork_call`` does).
        ``shadow_return``: ``callee`` returns a pointer to memory with derivatives: it returns ``{result,
        shadow...}``."""
        from enzcc.ad.forward import ForwardMode

        key = ("forward-call", callee.name, kinds) + ((width,) if width > 1 else ()) + \
            (("shadow",) if shadow_return else ()) + self._ra_key()
        G = self.cache.get(key)
        if G is None:
            dc = _call_site(call, callee, kinds, "forward", args, width, self.runtime_activity)
            maker = ForwardMode(dc, self.module, self.body_of(callee), logic=self, return_primal=True,
                                shadow_return=shadow_return)
            self.cache[key] = maker.G
            G = maker.build()
        return G

    def split_of_call(self, call, callee, kinds: tuple[str, ...], active_return: bool, dc=None, args=None,
                      parallel: bool = False, width: int = 1, shadow_return: bool = False):
        """``callee``'s (augmented primal, reverse) pair for a call with argument activity ``kinds``
        (:mod:`enzcc.ad.split`). ``args``: as for :meth:`forward_of_call`. ``parallel``: the reverse runs in
        several threads at once (an OpenMP parallel region: :mod:`enzcc.ad.calls.openmp`). ``width``: vector mode,
        each shadow (and the result's adjoint) once per lane. ``shadow_return``: the callee returns a pointer
        to memory with derivatives, and the augmented primal returns its shadow after it."""
        from enzcc.ad.split import make_split

        key = ("split", callee.name, kinds, active_return) + (("parallel",) if parallel else ()) + \
            ((width,) if width > 1 else ()) + (("shadow",) if shadow_return else ()) + self._ra_key()
        pair = self.cache.get(key)
        if pair is None:
            pair = make_split(self, dc or _call_site(call, callee, kinds, "reverse", args, width,
                                                     self.runtime_activity), kinds,
                              active_return, key, parallel, shadow_return)
        return pair


    def forward_split(self, dc: DiffCall, key: tuple[str, ...]):
        """``dc.fn``'s forward derivative for activity ``key``, cut into the augmented primal and the tangent
        halves of forward split mode (:class:`enzcc.ad.fwdsplit.ForwardSplit`)."""
        from enzcc.ad.fwdsplit import ForwardSplit

        ckey = ("forward-split", dc.fn.name, key)
        split = self.cache.get(ckey)
        if split is None:
            split = self.cache[ckey] = ForwardSplit(self, dc, key)
        return split


def _call_site(call, callee, kinds, mode: str, args=None, width: int = 1,
               runtime_activity: bool = False) -> DiffCall:
    """A :class:`DiffCall` describing a call inside differentiated code (its arguments, or ``args``, are the
    primal values at the call; the memory types at the call site type the callee's memory)."""
    specs = [ArgSpec(p, k, a) for p, k, a in zip(callee.args, kinds, call.args if args is None else args)]
    return DiffCall(call, mode, callee, specs, width=width, runtime_activity=runtime_activity)


__all__ = ["DerivedFunctions"]
