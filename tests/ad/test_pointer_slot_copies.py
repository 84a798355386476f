"""An integer copied through pointers kept in locals (REBOUND 4.4.11's reb_simulation_two_largest_particles,
``*p2 = *p1`` with ``int *p1, *p2``, inlined at -O0 into reb_collision_search, which passes ``&l1, &l2``): the
unoptimized code stores each parameter in a pointer local and reads it again for each access, so the copy's
load and store go through pointers no access types. When every pointer local involved only ever holds addresses
of the function's own locals, their declared types say what the copy moves. Before: 'cannot tell whether the
i32 copied here is a floating-point value'. A pointer local that holds a parameter, a float's or a byte
buffer's address, or whose own address is taken, keeps the refusal."""

import pytest

from enzcc.ad.errors import ADError
from enzcc.ad.memory import MemoryTypes
from enzcc.ir.parser import parse_module

HEADER = """target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-pc-linux-gnu"
declare void @keep(ptr)
"""

# the inlined body of two_largest(r, &l1, &l2) at -O0: *p1 = -1; ...; *p2 = *p1
COPY = """
define void @f(ptr %arg) {
entry:
  %l1 = alloca L1TYPE
  %l2 = alloca L1TYPE
  %p1 = alloca ptr
  %p2 = alloca ptr
  store ptr HELD, ptr %p1
  store ptr HELD2, ptr %p2
  ESCAPE
  %a = load ptr, ptr %p1
  store i32 -1, ptr %a
  %b = load ptr, ptr %p1
  %v = load i32, ptr %b
  %c = load ptr, ptr %p2
  store i32 %v, ptr %c
  ret void
}
"""


def _copy(l1="i32", held="%l1", escape=""):
    """The copy, with both locals of the type ``l1`` and both pointer locals holding ``held`` (its twin)."""
    text = COPY.replace("L1TYPE", l1).replace("HELD2", held.replace("1", "2")).replace("HELD", held)
    text = text.replace("ESCAPE", escape)
    fn = parse_module(HEADER + text).get_function("f").parse()
    load = next(i for i in fn.instructions() if str(i).startswith("%v = load i32"))
    return MemoryTypes(fn), load


def test_int_copied_through_pointer_locals_holding_int_locals():
    """Both pointer locals hold only the addresses of ``int`` locals: the copy moves an integer."""
    mt, load = _copy()
    assert mt.bits_type(load, required=True) is None


@pytest.mark.parametrize("l1,held,escape", [
    ("i32", "%arg", ""),                       # a parameter's memory: what it holds is the caller's
    ("float", "%l1", ""),                      # a float local: its bits, copied as an int
    ("[4 x i8]", "%l1", ""),                   # a byte buffer says nothing
    ("i32", "%l1", "call void @keep(ptr %p1)\n  call void @keep(ptr %p2)"),  # their addresses taken
    ("i32", "%l1", "call void @keep(ptr %l1)\n  call void @keep(ptr %l2)"),  # the locals' addresses elsewhere
    ("i32", "%l1", "%q1 = load ptr, ptr %p1\n  store float 1.0, ptr %q1\n"  # a float put there through
                   "  %q2 = load ptr, ptr %p2\n  store float 1.0, ptr %q2"),   # another read
])
def test_pointer_locals_that_say_nothing_keep_the_refusal(l1, held, escape):
    mt, load = _copy(l1, held, escape)
    with pytest.raises(ADError, match="cannot tell whether the i32 copied here"):
        mt.bits_type(load, required=True)
