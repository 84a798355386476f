"""Spelling of floating-point constants in LLVM IR.

LLVM prints ``double``/``float`` constants either in ``%e`` notation (when that
round-trips exactly) or as ``0x`` followed by the 16 hex digits of the IEEE
double (``float`` constants are widened to double first).  Other formats use
prefixed hex: ``0xH`` (half), ``0xR`` (bfloat), ``0xK`` (x86_fp80), ``0xL``
(fp128), ``0xM`` (ppc_fp128).
"""

from __future__ import annotations

import math
import struct

__all__ = ["format_float", "parse_float_text"]


def _double_bits(value: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", value))[0]


def _bits_double(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits & 0xFFFFFFFFFFFFFFFF))[0]


def _decompose(value: float) -> tuple[int, int, int] | None:
    """Return (sign, unbiased exponent, 53-bit significand with explicit bit),
    normalized so the significand's top bit is set; None for zero/inf/nan."""
    if value == 0 or math.isinf(value) or math.isnan(value):
        return None
    bits = _double_bits(value)
    sign = bits >> 63
    exp = (bits >> 52) & 0x7FF
    frac = bits & ((1 << 52) - 1)
    if exp == 0:  # subnormal: normalize
        shift = 53 - frac.bit_length()
        return sign, -1022 - shift, frac << shift
    return sign, exp - 1023, frac | (1 << 52)


def _to_x87(value: float) -> str:
    sign = 1 if math.copysign(1.0, value) < 0 else 0
    if math.isnan(value):
        se, mant = 0x7FFF, 0xC000000000000000
    elif math.isinf(value):
        se, mant = 0x7FFF, 0x8000000000000000
    elif value == 0:
        se, mant = 0, 0
    else:
        _, e, sig = _decompose(value)
        se, mant = e + 16383, sig << 11
    return "0xK%04X%016X" % ((sign << 15) | se, mant)


def _to_quad(value: float) -> str:
    sign = 1 if math.copysign(1.0, value) < 0 else 0
    if math.isnan(value):
        hi, lo = (0x7FFF << 48) | (1 << 47), 0
    elif math.isinf(value):
        hi, lo = 0x7FFF << 48, 0
    elif value == 0:
        hi, lo = 0, 0
    else:
        _, e, sig = _decompose(value)
        frac = (sig & ((1 << 52) - 1)) << 60  # 112-bit fraction
        hi = ((e + 16383) << 48) | (frac >> 64)
        lo = frac & ((1 << 64) - 1)
    hi |= sign << 63
    return "0xL%016X%016X" % (lo, hi)


def _round_to_f32(value: float) -> float:
    if math.isnan(value) or math.isinf(value):
        return value
    try:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


def _double_text(value: float) -> str:
    # Subnormals use hex: LLVM's own decimal spelling of them is not Python's.
    if math.isfinite(value) and (value == 0 or abs(value) >= 2.2250738585072014e-308):
        text = "%.6e" % value
        if float(text) == value:
            return text
    return "0x%016X" % _double_bits(value)


def format_float(kind: str, value: float) -> str:
    """LLVM spelling of ``value`` as a constant of floating type ``kind``.

    ``float`` values are rounded to single precision; ``half``/``bfloat``
    to their formats (round to nearest even).
    """
    if kind == "double":
        return _double_text(value)
    if kind == "float":
        return _double_text(_round_to_f32(value))
    if kind == "half":
        try:
            bits = struct.unpack("<H", struct.pack("<e", value))[0]
        except OverflowError:
            bits = 0xFC00 if value < 0 else 0x7C00
        return "0xH%04X" % bits
    if kind == "bfloat":
        if math.isnan(value):
            return "0xR7FC0"
        f32bits = struct.unpack("<I", struct.pack("<f", _round_to_f32(value)))[0]
        rounded = f32bits + 0x7FFF + ((f32bits >> 16) & 1)
        return "0xR%04X" % ((rounded >> 16) & 0xFFFF)
    if kind == "x86_fp80":
        return _to_x87(value)
    if kind == "fp128":
        return _to_quad(value)
    if kind == "ppc_fp128":
        return "0xM%016X%016X" % (_double_bits(value), 0)
    raise ValueError(f"unknown float kind {kind!r}")


def parse_float_text(text: str) -> float | None:
    """Best-effort Python float for an LLVM float literal (None if unknown)."""
    try:
        if not text.startswith(("0x", "-0x", "+0x")):
            return float(text)
        body = text[2:]
        prefix = body[:1]
        if prefix in "KLMHR" and prefix:
            digits = int(body[1:], 16)
            if prefix == "H":
                return struct.unpack("<e", struct.pack("<H", digits))[0]
            if prefix == "R":
                return struct.unpack("<f", struct.pack("<I", digits << 16))[0]
            if prefix == "K":
                se = digits >> 64
                mant = digits & ((1 << 64) - 1)
                sign = -1.0 if se >> 15 else 1.0
                exp = se & 0x7FFF
                if exp == 0x7FFF:
                    return sign * math.inf if (mant << 1) & ((1 << 64) - 1) == 0 else math.nan
                return sign * math.ldexp(mant, exp - 16383 - 63)
            if prefix == "L":
                lo = digits >> 64
                hi = digits & ((1 << 64) - 1)
                sign = -1.0 if hi >> 63 else 1.0
                exp = (hi >> 48) & 0x7FFF
                frac = ((hi & ((1 << 48) - 1)) << 64) | lo
                if exp == 0x7FFF:
                    return sign * math.inf if frac == 0 else math.nan
                if exp == 0:
                    return sign * math.ldexp(frac, -16382 - 112)
                return sign * math.ldexp(frac | (1 << 112), exp - 16383 - 112)
            if prefix == "M":
                return _bits_double(digits >> 64)
        return _bits_double(int(body, 16))
    except (ValueError, OverflowError, struct.error):
        return None
