/* wse_special.h -- special functions (Bessel, gamma family, orthogonal polynomials, erfcx...)
 * for generated kernels.
 *
 * Pasted after wse_prefix.h, and only into the translation units whose kernels call one of
 * these functions (they all start with `wsesp_`; compile/program.py checks the kernel text), so
 * ordinary kernels do not pay for parsing them. Like the prefix it is embedded in the extension
 * at build time (runtime/_build.py inlines the #include of the template body below), so the
 * generated program needs no include path.
 *
 * The bodies are ported from PyTorch's aten/src/ATen/native/Math.h (Cephes, SciPy, Boost and
 * Faddeeva derived; their licence notes are kept in wse_special_t.h) so values agree with
 * PyTorch's CPU kernels: each function is instantiated for float (suffix _f) and double (no
 * suffix) from the one template body, computing in that precision exactly where PyTorch does
 * (and in double where PyTorch accumulates in double, e.g. zeta). Half and bfloat16 inputs are
 * computed in float by the generated code, as PyTorch's CPU kernels do. The generated unit
 * includes <tgmath.h> first, so exp/log/... pick the float or double libm function from their
 * argument type as std:: overloads do in C++.
 */
#ifndef WSE_SPECIAL_H
#define WSE_SPECIAL_H

#include <tgmath.h>
#include <float.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WSE_SP_PI 3.141592653589793238462643383279502

/* Not inlined on purpose: a kernel loop calling an inlined body gets vectorised, and its libm
 * calls then go to libmvec (-D__FAST_MATH__, compile/build.py), whose erff/expf... differ from
 * glibc's scalar ones by an ulp or two. PyTorch's CPU kernels call the scalar ones, and some of
 * these algorithms amplify such differences (erfinv near +-1 by a factor of 10^4). */
#define WSE_SP_FN static __attribute__((noinline))

#define T float
#define SP(name) wsesp_##name##_f
#define WSE_SP_DOUBLE 0
#define WSE_SP_EPS FLT_EPSILON
#include "wse_special_t.h"
#undef T
#undef SP
#undef WSE_SP_DOUBLE
#undef WSE_SP_EPS

#define T double
#define SP(name) wsesp_##name
#define WSE_SP_DOUBLE 1
#define WSE_SP_EPS DBL_EPSILON
#include "wse_special_t.h"
#undef T
#undef SP
#undef WSE_SP_DOUBLE
#undef WSE_SP_EPS

#endif /* WSE_SPECIAL_H */
