"""The OCP 8-bit floating point formats (OFP8, v1.0), written from the specification's definitions
alone, independently of kernels/fp8.*: every code's value, and the code that rounding to nearest
(ties to the even code) with saturation to the largest finite value gives for chosen float32 inputs.

    python3 fp8_reference.py > fp8_table.txt      # the table fp8_test.cpp checks kernels/fp8.h against
    python3 fp8_reference.py --check fp8_table.txt  # exit 1 if the committed table differs

Definitions used (OFP8 section 5): E4M3 has bias 7, no infinities, NaN = S.1111.111 only (so its
largest value is 1.75 * 2^8 = 448); E5M2 has bias 15 and follows IEEE 754: exponent 11111 is
infinity (mantissa 0) or NaN. Exponent field 0 is subnormal: 2^(1 - bias) * mantissa / 2^m.
Conversion as NVIDIA's cvt.rn.satfinite: round to nearest even; a finite value or infinity beyond the
largest finite value saturates to it (with its sign); NaN gives the code 0x7F.

Lines: `values <format>` then 256 lines `<code hex> <value repr or nan/inf/-inf>`; `cases <format>`
then lines `<float32 bits hex> <expected code hex>`.
"""
import math
import struct
import sys

FORMATS = {"e4m3": (4, 3, 7), "e5m2": (5, 2, 15)}  # exponent bits, mantissa bits, bias


def value(fmt, code):
    e_bits, m_bits, bias = FORMATS[fmt]
    sign = -1.0 if code & 0x80 else 1.0
    exponent = (code >> m_bits) & ((1 << e_bits) - 1)
    mantissa = code & ((1 << m_bits) - 1)
    if fmt == "e4m3" and exponent == 15 and mantissa == 7:
        return math.nan
    if fmt == "e5m2" and exponent == 31:
        return sign * math.inf if mantissa == 0 else math.nan
    if exponent == 0:
        return sign * 2.0 ** (1 - bias) * mantissa / 2 ** m_bits
    return sign * 2.0 ** (exponent - bias) * (1 + mantissa / 2 ** m_bits)


def finite_codes(fmt):
    """(value, code) for every finite non-negative code, ascending."""
    return sorted((value(fmt, c), c) for c in range(128) if math.isfinite(value(fmt, c)))


def expected(fmt, x):
    """The code of x by brute force: nearest finite value, ties to the even code, saturating."""
    if math.isnan(x):
        return 0x7F
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    grid = finite_codes(fmt)
    a = abs(x)
    if a >= grid[-1][0]:
        return sign | grid[-1][1]
    best = min(grid, key=lambda vc: (abs(vc[0] - a), vc[1] & 1))
    return sign | best[1]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def next_f32(x, direction):
    bits = f32_bits(x)
    if x == 0:
        return struct.unpack("<f", struct.pack("<I", 1))[0] if direction > 0 else 0.0
    return struct.unpack("<f", struct.pack("<I", bits + direction))[0]


def cases(fmt):
    grid = [v for v, _ in finite_codes(fmt)]
    points = set(grid)
    for lo, hi in zip(grid, grid[1:]):
        mid = f32((lo + hi) / 2)
        assert mid == (lo + hi) / 2, "midpoints of adjacent FP8 values are float32 values"
        points.update([mid, next_f32(mid, -1), next_f32(mid, 1), f32(lo + (hi - lo) / 4), f32(lo + 3 * (hi - lo) / 4)])
    top = grid[-1]
    step = top - grid[-2]
    points.update([f32(top + step / 2), next_f32(f32(top + step / 2), 1), f32(top + step), f32(top * 4),
                   3.4028234663852886e38, math.inf])
    points.update([next_f32(0.0, 1), f32(grid[1] / 2), f32(grid[1] / 4), next_f32(f32(grid[1] / 2), 1)])
    out = []
    for p in sorted(points):
        for x in (p, -p):
            out.append((f32_bits(x), expected(fmt, x)))
    nan_bits = [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF]
    out += [(b, 0x7F) for b in nan_bits]
    return out


def table():
    lines = []
    for fmt in FORMATS:
        lines.append(f"values {fmt}")
        for code in range(256):
            v = value(fmt, code)
            lines.append(f"{code:02x} " + ("nan" if math.isnan(v) else repr(v)))
        lines.append(f"cases {fmt}")
        lines += [f"{bits:08x} {code:02x}" for bits, code in cases(fmt)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    text = table()
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        with open(sys.argv[2]) as f:
            if f.read() != text:
                sys.exit(f"{sys.argv[2]} differs from what fp8_reference.py writes: regenerate it")
        print(f"{sys.argv[2]}: as the specification's definitions give")
    else:
        sys.stdout.write(text)
