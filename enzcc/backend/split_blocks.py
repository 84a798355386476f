"""Split very large basic blocks before code generation.

LLVM's code generator is superlinear in the size of one basic block: CodeGenPrepare renumbers a block's
instructions whenever it moves one, and the two-address pass and instruction selection scan within the block.
A derivative of long straight-line code (generated or unrolled code, thousands of statements) is one block
about three times the size of the primal's, and its code generation took most of enzcc's time on such
programs (4,000 statements: 11.4 s in ``llc -O2``; 4.1 s with blocks split every 250 instructions).

Splitting a block changes nothing the program computes: the block ends in ``br label %next`` and ``next``
continues it. It is done on the LLVM text after the last optimization (which would merge the pieces again),
only when a block holds more than :data:`LIMIT` instructions; each such block becomes pieces of :data:`PIECE`.
A piece never starts before the block's phis, static allocas or exception pads, nor between a ``musttail``
call and its ``ret``; the phis of the block's successors name the last piece as their predecessor. Functions
whose blocks are named by ``blockaddress`` are left alone.

Each piece but the first starts with ``call void @llvm.assume(i1 true) [ "ignore"(ptr blockaddress(@f, %piece)) ]``,
which emits no code. Without it CodeGenPrepare merges a block into its only predecessor when that ends in an
unconditional branch, so the pieces became one block again before instruction selection; one block of 34,000
machine instructions at 4,000 statements, in which each floating-point constant is loaded once and used thousands
of times, and the two-address pass scans every use of a register for each instruction it may commute (2.6 of
4.7 s in ``llc -O2``; 0.09 of 2.2 s with the pieces kept apart). CodeGenPrepare leaves blocks whose address is
taken alone; the machine passes after register allocation still lay the pieces out one after the other.
"""

from __future__ import annotations

import re

#: blocks with more instructions than this are split
LIMIT = 1000
#: instructions per piece of a split block
PIECE = 250

#: the first instruction of each piece but the first: it takes the piece's address (and does nothing else), so
#: that CodeGenPrepare does not merge the pieces into one block again
_KEEP_APART = '  call void @llvm.assume(i1 true) [ "ignore"(ptr blockaddress({function}, %{label})) ]'
_ASSUME_DECLARATION = "declare void @llvm.assume(i1 noundef)"
_ASSUME_DECLARED = re.compile(r"^declare [^\n]*@llvm\.assume\(", re.M)

_LABEL = re.compile(r'^((?:[-\w.$]+)|(?:"(?:[^"\\]|\\.)*")):')
#: instructions a piece may not start at or before (a piece starts after the last of them in the block)
_LEADING = (" = phi ", " alloca ", " landingpad ", " catchpad ", " cleanuppad ", " catchswitch ")
_LEADING_FOUND = re.compile("|".join(re.escape(t) for t in _LEADING))


def largest_block(text: str) -> int:
    """The number of instructions of the largest basic block in the module's text."""
    largest = count = 0
    # an instruction's first line (``  %x = ...`` / ``  store ...``) is two spaces and neither a space (a debug
    # record), '#', ';' (a comment) nor ']' (a switch's case list continued); tested inline on every line
    for line in text.split("\n"):
        if line[:2] == "  ":
            if len(line) > 2 and line[2] not in " #;]":
                count += 1
        elif line and line[0] not in " ;":  # a label, a define, a closing brace, a global
            if count > largest:
                largest = count
            count = 0
    return max(largest, count)


def split_large_blocks(text: str, limit: int = LIMIT, piece: int = PIECE) -> str | None:
    """The module's text with every block of more than ``limit`` instructions split into pieces of ``piece``;
    None when no block is that large."""
    if largest_block(text) <= limit:
        return None
    taken = set(re.findall(r"blockaddress\(\s*(@(?:[-\w.$]+|\"(?:[^\"\\]|\\.)*\"))", text))
    lines = text.split("\n")
    out: list[str] = []
    counter = [0]
    i = 0
    while i < len(lines):
        line = lines[i]
        if not (line.startswith("define ") and line.endswith("{")):
            out.append(line)
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end] != "}":
            end += 1
        name = re.search(r"(@(?:[-\w.$]+|\"(?:[^\"\\]|\\.)*\"))\(", line)
        body = lines[i + 1:end]
        out.append(line)
        out.extend(body if name is None or name.group(1) in taken else
                   _split_function(body, limit, piece, counter, _entry_label(line, name.end()), name.group(1)))
        i = end
    if counter[0] and not _ASSUME_DECLARED.search(text):
        out.append(f"{_ASSUME_DECLARATION}\n")
    return "\n".join(out)


def _entry_label(define: str, params_start: int) -> str:
    """The number an unnamed entry block has (LLVM prints no label for it; successors' phis name it ``%N``):
    the one after the function's numbered parameters."""
    depth, j = 1, params_start
    while j < len(define) and depth:
        depth += {"(": 1, ")": -1}.get(define[j], 0)
        j += 1
    numbers = [int(n) for n in re.findall(r"\s%(\d+)(?=[,)])", define[params_start - 1:j])]
    return str(max(numbers) + 1 if numbers else 0)


def _split_function(body: list[str], limit: int, piece: int, counter: list[int], entry: str,
                    function: str) -> list[str]:
    blocks: list[tuple[str, list[str]]] = [(entry, [])]  # (label, lines); the entry block may be unnamed
    for line in body:
        m = _LABEL.match(line)
        if m:
            blocks.append((m.group(1), [line]))
        else:
            blocks[-1][1].append(line)
    out: list[str] = []
    renamed: dict[str, str] = {}
    for label, block in blocks:
        insts = [j for j, line in enumerate(block) if line[:2] == "  " and len(line) > 2 and line[2] not in " #;]"]
        if len(insts) <= limit:
            out.extend(block)
            continue
        first = 0
        for n, j in enumerate(insts):
            if _LEADING_FOUND.search(block[j]):
                first = n + 1
        cuts = []
        for n in range(first + piece, len(insts) - 1, piece):
            if "musttail call" in block[insts[n - 1]]:
                continue
            j = insts[n]
            while j > 0 and block[j - 1].lstrip().startswith("#dbg_"):
                j -= 1  # (debug records go with the instruction they precede)
            cuts.append(j)
        if not cuts:
            out.extend(block)
            continue
        start = 0
        last = None
        for j in cuts:
            out.extend(block[start:j])
            counter[0] += 1
            last = f"enzcc.split.{counter[0]}"
            out += [f"  br label %{last}", "", f"{last}:", _KEEP_APART.format(function=function, label=last)]
            start = j
        out.extend(block[start:])
        renamed["%" + label] = "%" + last
    if not renamed:
        return out
    incoming = re.compile(r"(, )(%(?:[-\w.$]+|\"(?:[^\"\\]|\\.)*\"))( \])")
    return [incoming.sub(lambda m: m.group(1) + renamed.get(m.group(2), m.group(2)) + m.group(3), line)
            if " = phi " in line else line for line in out]

