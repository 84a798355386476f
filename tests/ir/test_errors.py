"""Parse errors are IRParseError with a line number and the offending line."""

from __future__ import annotations

import pytest

from enzcc.ir import IRParseError, parse_module

CASES = [
    # (ir, expected line, message fragment)
    ("define i32 @f() {\n  %x = add i32 1, 2\n  %y = bogus i32 %x\n  ret i32 %y\n}\n",
     3, "unknown or unsupported instruction 'bogus'"),
    ("define i32 @f() {\n  ret i32 %nope\n}\n", 2, "use of undefined value '%nope'"),
    ("define void @f() {\n  br label %missing\n}\n", 2, "use of undefined label '%missing'"),
    ("define void @f() {\n  %x = add i32 1, 2\n  %x = add i32 1, 2\n  ret void\n}\n",
     3, "redefinition of value '%x'"),
    ("define void @f() {\n  %x = add i32 1, 2\n  %y = fadd double %x, 1.0\n  ret void\n}\n",
     3, "'%x' defined with type i32 but expected double"),
    ("define void @f(ptr %p) {\n  %v = load i32*, ptr %p\n  ret void\n}\n",
     2, "typed pointers are not supported"),
    ("define void @f() {\n  %x = add i32 1, %s\n  ret void\n}\n\n", 2, "use of undefined value"),
    ("define void @f() {\n  %v = alloca %struct.missing\n  ret void\n}\n",
     2, "use of undefined type '%struct.missing'"),
    ("define void @f() {\n  store i32 1, ptr null unordered\n  ret void\n}\n",
     2, "unexpected 'unordered' after instruction"),
    ("define void @f() {\n  %c = icmp foo i32 1, 2\n  ret void\n}\n", 2, "bad icmp predicate 'foo'"),
    ("define void @f() {\n  %r = call void @g()\n  ret void\n}\n", 2,
     "instructions returning void cannot have a name"),
    ("define void @f() {\n  ret void\n\n", 1, "function body is not closed"),
    ("\n\n@g = global i32 ~\n", 3, "unexpected character '~'"),
    ("define void @f() {\n  ret void ^\n}\n", 2, "unexpected character '^'"),
    ("define void @f() {\n  catchret from %x to label %y\n}\n", 2,
     "unknown or unsupported instruction 'catchret'"),
]


@pytest.mark.parametrize("ir,line,fragment", CASES)
def test_parse_errors(ir, line, fragment):
    with pytest.raises(IRParseError) as info:
        parse_module(ir).parse_all()
    err = info.value
    msg = str(err)
    assert "\n" not in msg
    assert err.line == line, msg
    assert fragment in msg
    assert msg.startswith(f"line {line}: ")
    if err.text is not None:
        assert msg.endswith(err.text.strip()[:100]) or len(err.text) > 200


def test_error_points_into_lazily_parsed_body():
    ir = ("declare void @g()\n\ndefine void @ok() {\n  ret void\n}\n\n"
          "define void @bad() {\nentry:\n  call void @g()\n  %z = fadd double 1.0,\n}\n")
    mod = parse_module(ir)  # header parsing succeeds; bodies are lazy
    mod.get_function("ok").parse()
    with pytest.raises(IRParseError) as info:
        mod.get_function("bad").parse()
    assert info.value.line == 10
    assert "expected a value" in str(info.value)


def test_missing_function_is_keyerror():
    mod = parse_module("declare void @g()\n")
    with pytest.raises(KeyError, match="@nope"):
        mod.get_function("nope")
