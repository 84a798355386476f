"""Library functions that only link the nodes of a C++ container (libstdc++'s ``std::list`` and the red-black
tree of ``std::map`` / ``std::set``): they move pointers, never floats. The shadow container must have the
same shape, so the forward code makes the same call on the shadows (a returned node's shadow is the call's
result on the shadow nodes); there is nothing to do in the reverse sweep. This is how Enzyme treats them.
"""

from __future__ import annotations

from enzcc.ad.registry import CallRule, register

from enzcc.ir import types as T
from enzcc.ad.emit import call_again

#: mangled names of the pointer-linking functions
MIRRORED = frozenset({
    "_ZNSt8__detail15_List_node_base7_M_hookEPS0_",          # std::list: link a node before a position
    "_ZNSt8__detail15_List_node_base9_M_unhookEv",           # std::list: unlink a node
    "_ZNSt8__detail15_List_node_base11_M_transferEPS0_S1_",  # std::list: splice
    "_ZNSt8__detail15_List_node_base10_M_reverseEv",         # std::list: reverse
    "_ZNSt8__detail15_List_node_base4swapERS0_S1_",          # std::list: swap
    "_ZSt29_Rb_tree_insert_and_rebalancebPSt18_Rb_tree_node_baseS0_RS_",
    "_ZSt28_Rb_tree_rebalance_for_erasePSt18_Rb_tree_node_baseRS_",
    "_ZSt18_Rb_tree_incrementPSt18_Rb_tree_node_base",
    "_ZSt18_Rb_tree_incrementPKSt18_Rb_tree_node_base",
    "_ZSt18_Rb_tree_decrementPSt18_Rb_tree_node_base",
    "_ZSt18_Rb_tree_decrementPKSt18_Rb_tree_node_base",
})

#: libstdc++ functions that compute only sizes and never touch floats (the hash tables' growth policy)
INACTIVE_PREFIXES = ("_ZNKSt8__detail20_Prime_rehash_policy",)


def is_mirrored(name: str | None) -> bool:
    return name in MIRRORED


def mirror_call(shadows, call):
    """The same call on the shadows of its pointer arguments, right after ``call`` (``shadows``: the
    :class:`enzcc.ad.shadow.Shadows` of the function); returns it (its result is the shadow of ``call``'s)."""
    return call_again(call, [shadows.of(a, call) if isinstance(a.type, T.PointerType) else a for a in call.args])



# -- the call rule ----------------------------------------------------------------------------------------

def _result_is_shadowed(activity, call) -> bool:
    return any(activity.is_active_ptr(a) for a in call.args)  # a node of a container with derivatives


def _mirror(shadows, call) -> None:
    if any(shadows.activity.is_active_ptr(a) for a in call.args):
        mirror_call(shadows, call)  # (a container's nodes linked: the shadow nodes too)


register(CallRule("c++ containers", inactive=True, passes_arguments=True, result_is_shadowed=_result_is_shadowed,
                  shadow=mirror_call, mirror=_mirror), names=tuple(sorted(MIRRORED)))
register(CallRule("c++ containers", inactive=True), prefixes=INACTIVE_PREFIXES)


__all__ = ["INACTIVE_PREFIXES", "MIRRORED", "is_mirrored", "mirror_call"]
