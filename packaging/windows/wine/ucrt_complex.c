/* TEST ONLY (packaging/test_windows.sh), never shipped: the C99 complex-math functions
   Wine 8's ucrtbase.dll exports as stubs (calling one raises "unimplemented function
   ucrtbase.dll.crealf"), which numpy 2 imports through api-ms-win-crt-math-l1-1-0.dll.
   Wine maps that API set to ucrtbase, so the stand-in is a whole ucrtbase.dll: these
   functions, and every other export forwarded to a renamed copy of Wine's own ucrtbase
   (ucrtwine.dll; build_stubs.sh writes the forwarding .def from its export table).

   Microsoft's ABI: _Dcomplex and _Lcomplex are {double[2]} (long double is double
   there), _Fcomplex is {float[2]}; these structs pass and return as MSVC's do. */
#include <complex.h>

typedef struct { double v[2]; } Dc;
typedef struct { float v[2]; } Fc;

static double _Complex d_in(Dc z) { return __builtin_complex(z.v[0], z.v[1]); }
static Dc d_out(double _Complex z) { Dc r = {{creal(z), cimag(z)}}; return r; }
static float _Complex f_in(Fc z) { return __builtin_complex(z.v[0], z.v[1]); }
static Fc f_out(float _Complex z) { Fc r = {{crealf(z), cimagf(z)}}; return r; }

#define UNARY(fn) \
  Dc shim_##fn(Dc z) { return d_out(fn(d_in(z))); } \
  Fc shim_##fn##f(Fc z) { return f_out(fn##f(f_in(z))); } \
  Dc shim_##fn##l(Dc z) { return d_out(fn(d_in(z))); }
#define REAL(fn) \
  double shim_##fn(Dc z) { return fn(d_in(z)); } \
  float shim_##fn##f(Fc z) { return fn##f(f_in(z)); } \
  double shim_##fn##l(Dc z) { return fn(d_in(z)); }

UNARY(cacos) UNARY(cacosh) UNARY(casin) UNARY(casinh) UNARY(catan) UNARY(catanh)
UNARY(ccos) UNARY(ccosh) UNARY(cexp) UNARY(clog) UNARY(conj) UNARY(cproj)
UNARY(csin) UNARY(csinh) UNARY(csqrt) UNARY(ctan) UNARY(ctanh)
REAL(cabs) REAL(carg) REAL(creal) REAL(cimag)

Dc shim_cpow(Dc x, Dc y) { return d_out(cpow(d_in(x), d_in(y))); }
Fc shim_cpowf(Fc x, Fc y) { return f_out(cpowf(f_in(x), f_in(y))); }
Dc shim_cpowl(Dc x, Dc y) { return d_out(cpow(d_in(x), d_in(y))); }

Dc shim__Cbuild(double re, double im) { Dc r = {{re, im}}; return r; }
Fc shim__FCbuild(float re, float im) { Fc r = {{re, im}}; return r; }
Dc shim__LCbuild(double re, double im) { Dc r = {{re, im}}; return r; }
Dc shim__Cmulcc(Dc x, Dc y) { return d_out(d_in(x) * d_in(y)); }
Fc shim__FCmulcc(Fc x, Fc y) { return f_out(f_in(x) * f_in(y)); }
Dc shim__LCmulcc(Dc x, Dc y) { return d_out(d_in(x) * d_in(y)); }
Dc shim__Cmulcr(Dc x, double y) { return d_out(d_in(x) * y); }
Fc shim__FCmulcr(Fc x, float y) { return f_out(f_in(x) * y); }
Dc shim__LCmulcr(Dc x, double y) { return d_out(d_in(x) * y); }
