/* config.h for GSL 2.8's sources in the real-library tests (tests/libraries/test_gsl.py): the definitions its
 * configure script writes on x86-64 Linux with glibc (`CC=enzcc ./configure`), without the package strings and
 * header checks no source of the test uses. */
#define HAVE_C99_INLINE 1
#define HAVE_INLINE 1
#define HAVE_DECL_ACOSH 1
#define HAVE_DECL_ASINH 1
#define HAVE_DECL_ATANH 1
#define HAVE_DECL_EXPM1 1
#define HAVE_DECL_FEENABLEEXCEPT 1
#define HAVE_DECL_FESETTRAPENABLE 0
#define HAVE_DECL_FINITE 1
#define HAVE_DECL_FPRND_T 0
#define HAVE_DECL_FREXP 1
#define HAVE_DECL_HYPOT 1
#define HAVE_DECL_ISFINITE 1
#define HAVE_DECL_ISINF 1
#define HAVE_DECL_ISNAN 1
#define HAVE_DECL_LDEXP 1
#define HAVE_DECL_LOG1P 1
#define HAVE_EXIT_SUCCESS_AND_FAILURE 1
#define HAVE_EXTENDED_PRECISION_REGISTERS 1 /* (configure's answer for any x86: GSL_COERCE_DBL stores and reloads) */
#define HAVE_GNUX86_IEEE_INTERFACE 1
#define HAVE_IEEE_COMPARISONS 1
#define HAVE_IEEE_DENORMALS 1
#define HAVE_LIBM 1
#define HAVE_MEMCPY 1
#define HAVE_MEMMOVE 1
#define HAVE_STDLIB_H 1
#define HAVE_STRING_H 1
#define HAVE_VPRINTF 1
#define RELEASED /**/
#define STDC_HEADERS 1
#define VERSION "2.8"

#if HAVE_EXTENDED_PRECISION_REGISTERS
#define GSL_COERCE_DBL(x) (gsl_coerce_double(x))
#else
#define GSL_COERCE_DBL(x) (x)
#endif

#ifdef __GNUC__
#define DISCARD_POINTER(p) do { ; } while(p ? 0 : 0);
#else
#define DISCARD_POINTER(p) /* ignoring discarded pointer */
#endif

#if defined(GSL_RANGE_CHECK_OFF) || !defined(GSL_RANGE_CHECK)
#define GSL_RANGE_CHECK 0  /* turn off range checking by default internally */
#endif

#define RETURN_IF_NULL(x) if (!x) { return ; }
