"""NVVM's scoped atomic adds of floats (CUDA's ``atomicAdd_block`` and ``atomicAdd_system``: the calls
``llvm.nvvm.atomic.add.gen.f.cta.*`` / ``.sys.*`` clang makes of them) become the ``atomicrmw fadd`` they stand
for, ``syncscope("block")`` for the block's scope, the system's (no syncscope) for ``sys``, relaxed (``monotonic``)
as PTX's ``atom`` is by default. The engine then differentiates them as any atomic add
(:mod:`enzcc.ad.atomics`: the tangent's add and the adjoint's read keep the scope). The other scoped atomics
(integer ones, exchanges, compare-and-exchange) stay calls: without a rule, the engine refuses them where they
touch memory with derivatives."""

from __future__ import annotations

from enzcc.ad.registry import register_copy_preparation
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.instructions import AtomicRMW, Call

PREFIX = "llvm.nvvm.atomic.add.gen.f."
SCOPES = {"cta": "block", "sys": None}
"""The intrinsics' scopes, and the LLVM sync scope each is (None: the system's, LLVM's default)."""


def scoped_adds_as_atomicrmw(fn) -> None:
    """In a private copy ``fn``: each call ``llvm.nvvm.atomic.add.gen.f.<scope>.<type>.p<N>(p, v)`` becomes
    ``atomicrmw fadd ptr p, v syncscope(...) monotonic``."""
    module = fn.module
    for inst in list(fn.instructions()):
        if not isinstance(inst, Call) or not (inst.callee_name or "").startswith(PREFIX):
            continue
        scope = inst.callee_name[len(PREFIX):].split(".", 1)[0]
        if scope not in SCOPES or len(inst.args) != 2 or not isinstance(inst.type, T.FloatType):
            continue
        p, v = inst.args
        size = module.data_layout.store_size(v.type) if module is not None else None
        rmw = IRBuilder.before(inst).insert(AtomicRMW("fadd", p, v, "monotonic", size, syncscope=SCOPES[scope]))
        inst.replace_all_uses_with(rmw)
        inst.erase()


register_copy_preparation(10, scoped_adds_as_atomicrmw)

__all__ = ["PREFIX", "SCOPES", "scoped_adds_as_atomicrmw"]
