"""The pipeline's text check for ``__enzyme_*`` calls left after an AD round (nested AD takes another round)."""

from enzcc.backend.pipeline import text_calls_enzyme

DECLARED = ('declare double @__enzyme_autodiff(ptr, ...)\n'
            'declare double @"__enzyme_fwddiff.q\\22x"(ptr, ...)\n')


def test_a_declaration_or_a_define_line_is_no_call():
    text = DECLARED + 'define double @g(double %x) {\n  ret double %x\n}\n'
    assert not text_calls_enzyme(text, {"__enzyme_autodiff", '__enzyme_fwddiff.q"x'})


def test_a_call_in_a_body_is_found_plain_or_quoted():
    plain = DECLARED + 'define double @g(double %x) {\n  %d = call double (ptr, ...) @__enzyme_autodiff(ptr @h, ' \
                       'double %x)\n  ret double %d\n}\n'
    quoted = plain.replace("@__enzyme_autodiff(ptr @h", '@"__enzyme_fwddiff.q\\22x"(ptr @h')
    assert text_calls_enzyme(plain, {"__enzyme_autodiff"})
    assert text_calls_enzyme(quoted, {'__enzyme_fwddiff.q"x'})
    assert not text_calls_enzyme(quoted, {"__enzyme_autodiff"})


def test_no_target_no_call():
    assert not text_calls_enzyme("  call void @__enzyme_autodiff()\n", set())
