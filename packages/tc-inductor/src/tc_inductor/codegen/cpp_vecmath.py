"""Vector versions of libm functions for the C++ backend (glibc's libmvec).

gcc only calls libmvec's vector ``expf``/``erff``/... when math.h declares them with the
``simd`` attribute, which glibc does under ``-ffast-math`` alone. Fast-math would also let gcc
reorder sums and drop NaN checks, so instead the kernels redeclare exactly the functions this
machine's libmvec provides (every x86 ISA variant gcc may pick: SSE4, AVX, AVX2, AVX-512), and
keep the strict flags. libmvec's functions are accurate to a few ulp, like eager's Sleef ones.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform

# None, on purpose: a loop vectorised with libmvec still runs its remainder (and any loop gcc does
# not vectorise) through scalar libm, and the two differ in the last bit. A backward that
# recomputes a value and compares it with a saved one (amax/max ties: `x == amax`) then picks
# different elements than the forward did, a wrong gradient (fuzz seed 4383, tanh). One
# implementation per function in a build keeps recomputed values bit-identical; tc_expf below is
# plain C, the same code in vector and scalar loops. Add a function here only with a scalar twin
# that is bit-identical to its vector variant.
UNARY: tuple[str, ...] = ()
BINARY: tuple[str, ...] = ()

# float exp is not libmvec's: chains like cumsum(exp(x)) -> sin amplify its last-bit differences
# from eager. This is Sleef's expf_u10, the routine eager's vectorised exp calls, in plain C that
# gcc inlines and vectorises (fma, rint and bit casts; no branches), so results match eager's.
EXPF = r"""
static inline float tc_expf(float d) {
  float q = __builtin_rintf(d * 1.442695040888963407359924681001892137426645954152985934135449406931f);
  float s = __builtin_fmaf(q, -0.693145751953125f, d);
  s = __builtin_fmaf(q, -1.428606765330187045e-06f, s);
  float u = 0.000198527617612853646278381f;
  u = __builtin_fmaf(u, s, 0.00139304355252534151077271f);
  u = __builtin_fmaf(u, s, 0.00833336077630519866943359f);
  u = __builtin_fmaf(u, s, 0.0416664853692054748535156f);
  u = __builtin_fmaf(u, s, 0.166666671633720397949219f);
  u = __builtin_fmaf(u, s, 0.5f);
  u = 1.0f + __builtin_fmaf(s * s, u, s);
  int32_t e = (int32_t)q, e1 = e >> 1, e2 = e - e1;
  uint32_t b1 = (uint32_t)(e1 + 0x7f) << 23, b2 = (uint32_t)(e2 + 0x7f) << 23;
  float p1, p2; std::memcpy(&p1, &b1, 4); std::memcpy(&p2, &b2, 4);
  u = u * p1 * p2;
  u = d < -104.0f ? 0.0f : u;
  u = d > 104.0f ? INFINITY : u;
  return d != d ? d : u;
}
"""
# x86 vector ABI: (ISA letter, lanes of float, lanes of double).
_ISAS = (("b", 4, 2), ("c", 8, 4), ("d", 8, 4), ("e", 16, 8))


@functools.cache
def _libmvec() -> ctypes.CDLL | None:
    if platform.machine() not in ("x86_64", "AMD64"):
        return None
    name = ctypes.util.find_library("mvec") or "libmvec.so.1"
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def _has_all_variants(lib: ctypes.CDLL, fn: str, single: bool, args: str) -> bool:
    suffix = "f" if single else ""
    return all(hasattr(lib, f"_ZGV{isa}N{nf if single else nd}{args}_{fn}{suffix}") for isa, nf, nd in _ISAS)


@functools.cache
def declarations() -> str:
    """C declarations giving this machine's libmvec functions the ``simd`` attribute ('' if none)."""
    lib = _libmvec()
    if lib is None:
        return ""
    lines = []
    for fns, args in ((UNARY, "v"), (BINARY, "vv")):
        params = ", ".join(["{t}"] * len(args))
        for fn in fns:
            for single, t, suffix in ((True, "float", "f"), (False, "double", "")):
                if _has_all_variants(lib, fn, single, args):
                    decl = f"{t} {fn}{suffix}({params.format(t=t)}) noexcept __attribute__((__simd__(\"notinbranch\")));"
                    lines.append(decl)
    if not lines:
        return ""
    return 'extern "C" {\n' + "\n".join(lines) + "\n}\n"
