"""C and C++ library calls that never carry derivatives: output, time, exit, random numbers, string queries, C++
output streams and ``std::string``, hashing. They stay in the forward code as they are and have no reverse.
(Memory functions are :mod:`enzcc.ad.calls.memfns`; input, which writes floats, is made an ordinary store when a
function is prepared: :data:`enzcc.ad.prepare.INPUT_CALLS`.)
"""

from __future__ import annotations

from enzcc.ad.errors import no_rule_error
from enzcc.ad.registry import CallRule, register
from enzcc.ir import types as T

#: calls that never carry derivatives
INACTIVE_CALLS = ("printf", "fprintf", "puts", "putchar", "fputs", "fflush", "abort", "exit", "fwrite", "time",
                  "clock", "rand", "srand", "rand_r", "random", "srandom", "assert", "__assert_fail", "omp_get_thread_num", "sprintf", "snprintf",
                  "__cxa_guard_acquire", "__cxa_guard_release", "malloc_usable_size", "strlen", "strnlen", "strcmp",
                  "strncmp", "memcmp", "bcmp", "_ZSt11_Hash_bytesPKvmm", "_ZSt15_Fnv_hash_bytesPKvmm")
#: string copies: they write characters
STRING_COPIES = ("strcpy", "strncpy", "stpcpy", "stpncpy", "strcat", "strncat")
#: const member functions of std::string (size, data, compare, find...): they read characters only
STRING_QUERY_PREFIXES = ("_ZNKSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE",
                         # its other members (constructors, assignment, append, destructor) too: they move
                         # characters, never floats, even where the string is a field of memory with derivatives
                         # (a map's key in its node); the shadow's copy of the string is never used as one
                         "_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE")
#: C++ output streams (std::ostream members, std::operator<< for text, std::endl): they only print
OUTPUT_STREAM_PREFIXES = ("_ZNSo", "_ZStlsISt11char_traitsIcE", "_ZSt16__ostream_insertIcSt11char_traitsIcE",
                          "_ZSt4endlIcSt11char_traitsIcE", "_ZSt5flushIcSt11char_traitsIcE",
                          # wide streams (std::wcout)
                          "_ZNSt13basic_ostreamIwSt11char_traitsIwEE", "_ZStlsIwSt11char_traitsIwEE",
                          "_ZStlsISt11char_traitsIwEE", "_ZSt16__ostream_insertIwSt11char_traitsIwEE",
                          "_ZSt4endlIwSt11char_traitsIwEE", "_ZSt5flushIwSt11char_traitsIwEE")



def _characters_only(mode, call) -> bool:
    """A string copy has no derivative where it writes characters into memory that holds no floats, also when
    that memory hangs off memory with derivatives (REBOUND's message log in its simulation struct: the shadow's
    copy of the buffer is never read as floats). Characters written over floats (a ``double`` array taken as a
    ``char *``) would need the floats' derivatives zeroed: refused, as before."""
    dest = call.args[0]
    if mode.activity.is_active_ptr(dest) and \
            any(isinstance(k, T.FloatType) for k in mode.memtypes.access_kinds(dest)):
        raise no_rule_error(call, call.callee_name, mode.module)
    return True


register(CallRule("libc", forward=_characters_only,
                  reverse=lambda mode, call, entry, block, b: _characters_only(mode, call)), names=STRING_COPIES)
register(CallRule("libc", inactive=True), names=INACTIVE_CALLS, prefixes=STRING_QUERY_PREFIXES + OUTPUT_STREAM_PREFIXES)

__all__ = ["INACTIVE_CALLS", "STRING_COPIES", "OUTPUT_STREAM_PREFIXES", "STRING_QUERY_PREFIXES"]
