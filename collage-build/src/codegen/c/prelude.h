/* Profiled builds need clock_gettime, which strict C99 hides. */
#if defined(CL_PROFILE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 199309L
#endif
#include <stdint.h>
#include <math.h>

typedef void (*collage_task)(void *ctx, int64_t begin, int64_t end);
typedef struct {
    const void *pool;
    void (*parallel_for)(const void *pool, int64_t n, collage_task task, void *ctx);
    void (*sgemm)(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_rs, int64_t a_cs,
                  const float *b, int64_t b_rs, int64_t b_cs, float *c, int64_t ldc);
    int64_t threads;
    void *lib; /* the model instance's library state (oneDNN primitives), or NULL */
} collage_rt;
typedef struct {
    uint8_t *A;
    const uint8_t *W;
    const void *const *I;
    int64_t shares; /* a group task's shares of its instances (one per thread, one slot each) */
} collage_ctx;

/* AddressSanitizer builds (COLLAGE_SANITIZE): before each stage the arena is poisoned but for the
   buffers the stage reads and writes (CL_LIVE(arena bytes, offset, bytes, ...)), so that an access
   past a buffer inside the one arena allocation is reported too. Nothing in other builds. */
#if defined(__SANITIZE_ADDRESS__)
#define CL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CL_ASAN 1
#endif
#endif
#ifdef CL_ASAN
#include <stddef.h>
void __asan_poison_memory_region(void const volatile *addr, size_t size);
void __asan_unpoison_memory_region(void const volatile *addr, size_t size);
static void cl_live(uint8_t *a, const size_t *r, size_t n) {
    __asan_poison_memory_region(a, r[0]);
    for (size_t i = 1; i + 1 < n; i += 2) __asan_unpoison_memory_region(a + r[i], r[i + 1]);
}
#define CL_LIVE(...) do { static const size_t cl_r_[] = {__VA_ARGS__}; cl_live(A, cl_r_, sizeof cl_r_ / sizeof cl_r_[0]); } while (0)
#else
#define CL_LIVE(...) do { } while (0)
#endif

/* Profiled builds (CL_PROFILE: `collage bench --profile`): the run function adds the wall time of
   each kernel, from the end of the one before, to the kernel's counter in the array P
   (nanoseconds; CL_TICK(P, id) after kernel id's calls). Nothing in other builds. */
#ifdef CL_PROFILE
#include <time.h>
static uint64_t cl_now_ns(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec; }
#define CL_TICK_START() uint64_t cl_tick_ = cl_now_ns(); (void)cl_tick_
#define CL_TICK(P, k) do { const uint64_t t_ = cl_now_ns(); P[k] += t_ - cl_tick_; cl_tick_ = t_; } while (0)
#else
#define CL_TICK_START() do { } while (0)
#define CL_TICK(P, k) do { } while (0)
#endif

#define CL_INT_OPS(T, S) \
static inline T cl_abs_##S(T x) { return x < 0 ? (T)-x : x; } \
static inline T cl_sign_##S(T x) { return (T)((x > 0) - (x < 0)); } \
static inline T cl_max_##S(T a, T b) { return a > b ? a : b; } \
static inline T cl_min_##S(T a, T b) { return a < b ? a : b; } \
static inline T cl_div_##S(T a, T b) { return b == 0 ? 0 : (T)(a / b); } \
static inline T cl_fmod_##S(T a, T b) { return b == 0 ? 0 : (T)(a % b); } \
static inline T cl_mod_##S(T a, T b) { if (b == 0) return 0; T r = (T)(a % b); return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r; } \
static inline T cl_shl_##S(T a, T b) { return (b < 0 || (uint64_t)b >= 8 * sizeof(T)) ? 0 : (T)((uint64_t)a << b); } \
static inline T cl_shr_##S(T a, T b) { return (b < 0 || (uint64_t)b >= 8 * sizeof(T)) ? (T)(a < 0 ? -1 : 0) : (T)(a >> b); } \
static inline T cl_pow_##S(T a, T b) { if (b < 0) return (T)pow((double)a, (double)b); T r = 1; while (b) { if (b & 1) r = (T)(r * a); a = (T)(a * a); b >>= 1; } return r; }
CL_INT_OPS(int64_t, i64)
static inline int64_t cl_floordiv_i64(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t cl_ceildiv_i64(int64_t a, int64_t b) { return -cl_floordiv_i64(-a, b); }
CL_INT_OPS(int32_t, i32)
CL_INT_OPS(uint8_t, bool)
CL_INT_OPS(int8_t, i8)
CL_INT_OPS(uint8_t, u8)
CL_INT_OPS(int16_t, i16)
CL_INT_OPS(uint16_t, u16)
CL_INT_OPS(uint32_t, u32)
CL_INT_OPS(uint64_t, u64)

/* The 16-bit floats are stored as their bits and computed on as float (the graph casts around
   every operator but Cast). Conversions round to nearest even; NaN stays a (quiet) NaN. */
typedef union { float f; uint32_t u; } cl_f32_bits;
typedef union { double f; uint64_t u; } cl_f64_bits;
/* BitCast: a float's bits as an integer of its size, and back. */
static inline uint32_t cl_bits_f32(float f) { cl_f32_bits v; v.f = f; return v.u; }
static inline float cl_f32_of_bits(uint32_t u) { cl_f32_bits v; v.u = u; return v.f; }
static inline uint64_t cl_bits_f64(double f) { cl_f64_bits v; v.f = f; return v.u; }
static inline double cl_f64_of_bits(uint64_t u) { cl_f64_bits v; v.u = u; return v.f; }
static inline float cl_f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    cl_f32_bits v;
    if (e == 0x1f) v.u = s | 0x7f800000u | (m << 13);
    else if (e != 0) v.u = s | ((e + 112u) << 23) | (m << 13);
    else { float f = (float)m * 5.9604644775390625e-8f; return s ? -f : f; }
    return v.f;
}
static inline uint16_t cl_f32_to_f16(float f) {
    cl_f32_bits v; v.f = f;
    uint32_t s = (v.u >> 16) & 0x8000u, a = v.u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00u); /* 65520 and up round to inf */
    if (a < 0x38800000u) { /* below 2^-14: a subnormal, m * 2^-24 with m rounded */
        cl_f32_bits w; w.u = a;
        return (uint16_t)(s | (uint32_t)nearbyintf(w.f * 16777216.0f));
    }
    a -= 0x38000000u;
    return (uint16_t)(s | ((a + 0xfffu + ((a >> 13) & 1u)) >> 13));
}
static inline float cl_bf16_to_f32(uint16_t h) { cl_f32_bits v; v.u = (uint32_t)h << 16; return v.f; }
static inline uint16_t cl_f32_to_bf16(float f) {
    cl_f32_bits v; v.f = f;
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40u);
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}

/* The 8-bit floats: MAN mantissa bits, exponent BIAS; KIND 0: no infinity, NaN all ones
   (E4M3FN); 1: no infinity, no -0, NaN 0x80 (FNUZ); 2: IEEE-like (E5M2). Encoding rounds to
   nearest even and saturates at MAX (Cast's saturate=0 is handled by the operator). */
static inline float cl_f8_decode(uint8_t b, int man, int bias, int kind) {
    int e = (b & 0x7f) >> man, m = b & ((1 << man) - 1), emax = (1 << (7 - man)) - 1;
    if (kind == 1 && b == 0x80) return NAN;
    if (kind == 0 && (b & 0x7f) == 0x7f) return NAN;
    if (kind == 2 && e == emax) return m ? NAN : ((b & 0x80) ? -INFINITY : INFINITY);
    float v = e == 0 ? ldexpf((float)m, 1 - bias - man) : ldexpf((float)(m + (1 << man)), e - bias - man);
    return (b & 0x80) ? -v : v;
}
static inline uint8_t cl_f8_encode(float x, int man, int bias, int kind, float max) {
    if (x != x) return kind == 1 ? 0x80 : 0x7f;
    uint8_t s = signbit(x) ? 0x80 : 0;
    float a = fabsf(x);
    if (a > max) a = max;
    int e;
    frexpf(a, &e);
    int q = (a == 0.0f || e - 1 < 1 - bias ? 1 - bias : e - 1) - man;
    float r = ldexpf(nearbyintf(ldexpf(a, -q)), q);
    if (r > max) r = max;
    if (r == 0.0f) return kind == 1 ? 0 : s;
    frexpf(r, &e);
    if (e - 1 + bias <= 0) return (uint8_t)(s | (uint8_t)ldexpf(r, bias - 1 + man));
    return (uint8_t)(s | ((e - 1 + bias) << man) | ((int)ldexpf(r, man - (e - 1)) - (1 << man)));
}
#define CL_F8(NAME, MAN, BIAS, KIND, MAX) \
static inline float cl_##NAME##_to_f32(uint8_t b) { return cl_f8_decode(b, MAN, BIAS, KIND); } \
static inline uint8_t cl_f32_to_##NAME(float x) { return cl_f8_encode(x, MAN, BIAS, KIND, MAX); }
CL_F8(f8e4m3fn, 3, 7, 0, 448.0f)
CL_F8(f8e4m3fnuz, 3, 8, 1, 240.0f)
CL_F8(f8e5m2, 2, 15, 2, 57344.0f)
CL_F8(f8e5m2fnuz, 2, 16, 1, 57344.0f)
/* FLOAT4E2M1, one per byte in the low four bits: sign, 2 exponent bits (bias 1), 1 mantissa bit;
   no infinity, no NaN. Encoding rounds to nearest even (the comparisons below are the midpoints,
   each tie going to the even code) and saturates at 6; NaN becomes a zero of the opposite sign,
   as ml_dtypes (ONNX's reference) converts it. */
static inline float cl_f4e2m1_to_f32(uint8_t b) {
    static const float v[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    return (b & 8) ? -v[b & 7] : v[b & 7];
}
static inline uint8_t cl_f32_to_f4e2m1(float x) {
    uint8_t s = signbit(x) ? 8 : 0;
    if (x != x) return (uint8_t)(s ^ 8);
    float a = fabsf(x);
    uint8_t c = a <= 0.25f ? 0 : a < 0.75f ? 1 : a <= 1.25f ? 2 : a < 1.75f ? 3
        : a <= 2.5f ? 4 : a < 3.5f ? 5 : a <= 5.0f ? 6 : 7;
    return (uint8_t)(s | c);
}
/* FLOAT8E8M0: 2^(b - 127); 0xff is NaN. Encoding to the nearest power (DType::encode_byte; Cast
   lowers its round_mode itself): the f32's biased exponent, plus one when the fraction's first
   bit is set and, for the f32 subnormals, another (but not past 2^127); NaN and infinity are
   NaN; the sign is ignored. */
static inline float cl_f8e8m0_to_f32(uint8_t b) { return b == 0xff ? NAN : ldexpf(1.0f, (int)b - 127); }
static inline uint8_t cl_f32_to_f8e8m0(float x) {
    uint32_t u = cl_bits_f32(x), e = (u >> 23) & 0xffu;
    if (e == 0xffu) return 0xff;
    int up = (u & 0x400000u) && ((u & 0x3fffffu) || e > 0) && e != 0xfeu;
    return (uint8_t)(e + (uint32_t)up);
}
/* The integers of fewer than 8 bits, one per byte: a conversion keeps the low bits (two's
   complement), as a conversion to a narrower C integer type does. From a float: truncated to
   int64 first, NaN and values beyond int64 pinned to INT64_MIN (as x86 converts them, and the
   interpreter), whose low bits are 0. */
static inline int64_t cl_f2i64(double x) { return (x == x && x > -9.3e18 && x < 9.2e18) ? (int64_t)x : INT64_MIN; }
static inline int8_t cl_wrap_i4(int64_t v) { return (int8_t)(((v & 15) ^ 8) - 8); }
static inline uint8_t cl_wrap_u4(int64_t v) { return (uint8_t)(v & 15); }
static inline int8_t cl_wrap_i2(int64_t v) { return (int8_t)(((v & 3) ^ 2) - 2); }
static inline uint8_t cl_wrap_u2(int64_t v) { return (uint8_t)(v & 3); }

/* cl_maxc / cl_minc: max and min with a bound `c` that is not NaN (a Clip's constant bound),
   equal to cl_max / cl_min there (a NaN `a` is returned, ties give `a`) in one comparison and
   one select. */
/* A select on the bits, branch-free: written as `c ? a : b`, GCC branches on a comparison in
   code it does not vectorise (a 7-wide row's epilogue). NaN-propagating max / min are two
   selects GCC keeps branch-free both ways (a blend and a cmov in scalar code, min/max and a
   blend in vectors); written with `cl_sel` they stop a loop that also calls cl_expf from
   vectorising (Celu). */
static inline float cl_sel_f32(int c, float a, float b) { cl_f32_bits x = { a }, y = { b }; uint32_t m = 0u - (uint32_t)c; x.u = (x.u & m) | (y.u & ~m); return x.f; }
static inline double cl_sel_f64(int c, double a, double b) { cl_f64_bits x = { a }, y = { b }; uint64_t m = 0u - (uint64_t)c; x.u = (x.u & m) | (y.u & ~m); return x.f; }
#define CL_FLOAT_OPS(T, S) \
static inline T cl_sign_##S(T x) { return x > 0 ? (T)1 : (x < 0 ? (T)-1 : x); } \
static inline T cl_max_##S(T a, T b) { T m = a >= b ? a : b; return a != a ? a : m; } \
static inline T cl_min_##S(T a, T b) { T m = a <= b ? a : b; return a != a ? a : m; } \
static inline T cl_maxc_##S(T a, T c) { return a < c ? c : a; } \
static inline T cl_minc_##S(T a, T c) { return a > c ? c : a; } \
static inline T cl_mod_##S(T a, T b, T r) { return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
CL_FLOAT_OPS(float, f32)
CL_FLOAT_OPS(double, f64)

/* erf for f32 without a library call, so loops and epilogues that use it vectorise (f64 keeps
   libm's erf): the Maclaurin series for |x| < 0.5 (relative error < 1e-6) and Abramowitz & Stegun
   7.1.28 above (|error| <= 3e-7). */
#define CL_ERF_SMALL(x, x2) (1.1283791671f * (x) * (1.0f + (x2) * (-0.3333333333f + (x2) * (0.1f + (x2) * (-0.0238095238f + (x2) * 0.0046296296f)))))
#define CL_ERF_POLY(x) (1.0f + (x) * (0.0705230784f + (x) * (0.0422820123f + (x) * (0.0092705272f + (x) * (0.0001520143f + (x) * (0.0002765672f + (x) * 0.0000430638f))))))
static inline float cl_erff(float x) {
    float a = fabsf(x), t = CL_ERF_POLY(a);
    t = t * t; t = t * t; t = t * t; t = t * t;
    return cl_sel_f32(a < 0.5f, CL_ERF_SMALL(x, x * x), copysignf(1.0f - 1.0f / t, x));
}

/* exp for f32 without a library call, so loops and epilogues that use it vectorise (f64 keeps
   libm's exp): x = n ln2 + r with |r| <= ln2 / 2 (n rounded by adding 1.5 * 2^23, ln2 split in
   two so n ln2 is exact), exp(r) by a polynomial of degree 5 fitted for the least maximum relative
   error on that interval (8e-8 in exact arithmetic; the Taylor polynomial needs degree 6),
   2^n as two exponent-field scalings so that n above 127 overflows to inf and n below -126 falls
   gradually to 0. Inputs above 89 are clamped to it (the result is inf); below -104 the result
   is 0, selected on the bits after computing exp(0): clamped to -104 instead, every such input
   (a masked attention score, -1e4) would compute a denormal, and each denormal result costs a
   microcode assist of a hundred cycles or more. NaN stays NaN (it fails both comparisons). */
#define CL_EXP_POLY(r) (1.0000001f + (r) * (0.99999967f + (r) * (0.49998899f + (r) * (0.16667663f + (r) * (0.041915071f + (r) * 0.0082917270f)))))
/* The reduction x = n ln2 + r as three floats: t (n plus the rounding constant, whose bits
   carry n), n and r. */
#define CL_EXP_REDUCE(x, t, n, r) \
    float t = (x) * 1.44269504f + 12582912.0f, n = t - 12582912.0f, r = (x) - n * 0.693145752f - n * 1.42860677e-6f
static inline float cl_expf(float x) {
    float c = cl_sel_f32(x < -104.0f, 0.0f, cl_minc_f32(x, 89.0f));
    CL_EXP_REDUCE(c, t, n, r);
    union { float f; uint32_t u; } b = { t }, s1, s2;
    int32_t k = (int32_t)(b.u - 0x4B400000u), k1 = k >> 1;
    s1.u = (uint32_t)(k1 + 127) << 23;
    s2.u = (uint32_t)(k - k1 + 127) << 23;
    return cl_sel_f32(x < -104.0f, 0.0f, CL_EXP_POLY(r) * s1.f * s2.f);
}

/* exp of an argument at most 0 (x - max over a softmax row, UnOp::ExpNonPos): 2^n, n in
   [-126, 0], is one exponent-field scaling and nothing overflows, so neither the upper clamp
   nor cl_expf's second scaling is needed; arguments below -87, whose results are below or within
   a few ulps of the least normal float, give 0 (no denormal is computed). GCC vectorises it
   to about 15 operations a vector against cl_expf's 27. NaN stays NaN. */
static inline float cl_expf_nonpos(float x) {
    float c = cl_maxc_f32(x, -87.0f);
    CL_EXP_REDUCE(c, t, n, r);
    cl_f32_bits b = { t }, s;
    s.u = (b.u - 0x4B3FFF81u) << 23;
    return cl_sel_f32(x < -87.0f, 0.0f, CL_EXP_POLY(r) * s.f);
}

/* tanh for f32 without a library call, so that it vectorises (glibc's tanhf is a scalar call):
   below |x| = 0.125 its odd Taylor polynomial to x^9, above it 1 - 2 / (exp(2|x|) + 1) with x's
   sign (1 exactly once the exponential saturates); relative error below 1e-6 over [-50, 50]
   against libm's double tanh. NaN stays NaN. |x| is clamped to 9 (where the result already
   rounds to 1), so the exponential of 2|x| needs none of cl_expf's range selects: its argument
   lies in [0, 18] and 2^n in one exponent-field scaling (a NaN passes the clamp and stays NaN). */
static inline float cl_tanhf(float x) {
    float a = fabsf(x), x2 = x * x;
    float c = 2.0f * cl_sel_f32(a > 9.0f, 9.0f, a);
    CL_EXP_REDUCE(c, t, n, r);
    union { float f; uint32_t u; } b = { t }, s;
    s.u = (b.u - 0x4B400000u + 127u) << 23;
    float big = copysignf(1.0f - 2.0f / (CL_EXP_POLY(r) * s.f + 1.0f), x);
    float small = x * (1.0f + x2 * (-0.33333334f + x2 * (0.13333334f + x2 * (-0.05396825f + x2 * 0.02186949f))));
    return cl_sel_f32(a < 0.125f, small, big);
}

/* log for f32 without a library call, so that it vectorises (glibc's logf is a scalar call):
   x = 2^k m with m in [sqrt(1/2), sqrt(2)) (subnormals scaled by 2^25 first), f = m - 1,
   log(1 + f) = f - f^2/2 + s (f^2/2 + R(s^2)) with s = f / (2 + f) and R the classic degree-4
   minimax polynomial in s^2, k ln2 in two parts; within 1 ulp of libm's. 0 gives -inf, negative
   x NaN, inf inf, NaN stays NaN. */
static inline float cl_logf(float x) {
    cl_f32_bits b = { x }, sc = { x * 33554432.0f };
    uint32_t sub = b.u < 0x00800000u, ms = 0u - sub;
    uint32_t u = (sc.u & ms) | (b.u & ~ms), ix = u - 0x3f3504f3u;
    int32_t k = ((int32_t)ix >> 23) - 25 * (int32_t)sub;
    cl_f32_bits m = { .u = (ix & 0x007fffffu) + 0x3f3504f3u };
    float f = m.f - 1.0f, s = f / (2.0f + f), z = s * s, w = z * z, dk = (float)k;
    float rr = w * (0.40000972152f + w * 0.24279078841f) + z * (0.66666662693f + w * 0.28498786688f);
    float hf = 0.5f * f * f;
    cl_f32_bits r = { s * (hf + rr) + dk * 9.0580006145e-06f - hf + f + dk * 0.69313812256f };
    /* 0, negative, inf and NaN: one merge on the bits (a select would let GCC move the division
       into a branch, which it then cannot vectorise). */
    cl_f32_bits sp = { cl_sel_f32(x == 0.0f, -INFINITY, cl_sel_f32(x < 0.0f, NAN, x)) };
    uint32_t special = 0u - (uint32_t)(u - 0x00800000u >= 0x7f000000u);
    r.u = (r.u & ~special) | (sp.u & special);
    return r.f;
}

/* sin and cos for f32 without a library call, so that they vectorise. The argument is reduced
   to x = n pi/2 + r in double. For |x| < 2^28, n is rounded by adding 1.5 * 2^52 and pi/2 taken
   in three parts, the first of 24 bits so that n times it is exact (0.5 ulp). Above, x / (2 pi)
   mod 1 is summed from x times nine 24-bit chunks of 1 / (2 pi), each product exact and reduced
   mod 1 on its own (Payne and Hanek's idea without a table, whose gathers cost six times more;
   a few ulp where x is closest to a multiple of pi/2). Then the Taylor polynomials of sin and cos
   on |r| <= pi/4 in double (error < 1e-12), and the quadrant n mod 4 picks and signs one. inf
   gives NaN, NaN stays NaN, sin keeps -0. */
/* One term of x / (2 pi) mod 1: x times a chunk `c` (exact), less its nearest integer; `big`
   where the product may reach 2^50 (the rounding by 1.5 * 2^52 needs less; such a product is an
   integer already, which contributes nothing). */
#define CL_TURN_(x, c, big) ({ double tq_ = (x) * (c), q_ = (tq_ + 0x1.8p52) - 0x1.8p52; \
    tq_ - cl_sel_f64((big) && fabs(tq_) >= 0x1p50, tq_, q_); })
#define CL_MOD1_(s) ((s) - (((s) + 0x1.8p52) - 0x1.8p52))
static inline float cl_sincosf_(float x, int64_t shift) {
    const double magic = 0x1.8p52;
    double xd = x, t = xd * 0.6366197723675814 + magic, n = t - magic;
    double r = xd - n * 1.5707963705062866 - n * -4.3711390001862426e-08 - n * -2.6718907338610155e-24;
    /* |x| < 2^128: chunks 0-3 may give products of 2^50 and more, 4-5 less, 6-8 less than 2^-17
       (their sum rounded once is exact enough). */
    double s = CL_TURN_(xd, 0x1.45f3p-3, 1) + CL_TURN_(xd, 0x1.b72722p-25, 1);
    s = CL_MOD1_(s) + CL_TURN_(xd, 0x1.529fcp-54, 1) + CL_TURN_(xd, 0x1.3abe8p-77, 1);
    s = CL_MOD1_(s) + CL_TURN_(xd, 0x1.f534dcp-98, 0) + CL_TURN_(xd, 0x1.c0db6p-122, 0);
    s = CL_MOD1_(s) + xd * (0x1.4acc9ep-145 + 0x1.0e41p-172 + 0x1.fe516p-194);
    double f = 4.0 * s, th = f + magic;
    int huge = fabsf(x) >= 0x1p28f;
    r = cl_sel_f64(huge, (f - (th - magic)) * 1.5707963267948966, r);
    cl_f64_bits qn = { cl_sel_f64(huge, th, t) };
    double r2 = r * r;
    double sn = r + r * r2 * (-1.0 / 6 + r2 * (1.0 / 120 + r2 * (-1.0 / 5040 + r2 * (1.0 / 362880 + r2 * (-1.0 / 39916800)))));
    double cs = 1.0 + r2 * (-0.5 + r2 * (1.0 / 24 + r2 * (-1.0 / 720 + r2 * (1.0 / 40320 + r2 * (-1.0 / 3628800 + r2 * (1.0 / 479001600))))));
    int64_t quad = (int64_t)qn.u + shift;
    double v = cl_sel_f64((int)(quad & 1), cs, sn);
    v = cl_sel_f64((int)((quad >> 1) & 1), -v, v);
    /* sin(-0) is -0: the zero's sign bit, put back on the bits (a select would move the
       arithmetic into a branch that GCC does not vectorise). */
    cl_f32_bits b = { x }, o = { (float)v };
    o.u |= b.u & 0x80000000u & (0u - (uint32_t)((shift == 0) & (x == 0.0f)));
    return o.f;
}
static inline float cl_sinf(float x) { return cl_sincosf_(x, 0); }
static inline float cl_cosf(float x) { return cl_sincosf_(x, 1); }

/* Rows of accumulators on the stack are declared 64-byte aligned: GCC 12 raises a short local
   array's alignment to vectorise its loops and may then address it in the red zone at an
   offset it wrongly takes as aligned (an aligned store faulting on an unpadded strided pool's
   80-byte row); a declared alignment makes it realign the frame itself. */
#define CL_STACK_ALIGNED __attribute__((aligned(64)))

/* Vector types (GCC / Clang vector extensions) for register-blocked kernels; unaligned access. */
typedef float cl_f32x16 __attribute__((vector_size(64), aligned(4), may_alias));
typedef float cl_f32x8 __attribute__((vector_size(32), aligned(4), may_alias));
typedef float cl_f32x4 __attribute__((vector_size(16), aligned(4), may_alias));
typedef int32_t cl_i32x16 __attribute__((vector_size(64)));
typedef int32_t cl_i32x8 __attribute__((vector_size(32)));
typedef int32_t cl_i32x4 __attribute__((vector_size(16)));
/* Two adjacent floats as one 64-bit integer, broadcast to every pair of a 16-lane vector
   (`x + (cl_i64x8){0}`): a channel-vectorised tile that holds two columns a vector. */
typedef int64_t cl_i64x8 __attribute__((vector_size(64)));
typedef int64_t cl_i64a __attribute__((aligned(4), may_alias));
/* Lanes of two W-lane vectors picked by constant indices (0..W-1 from a, W..2W-1 from b): Clang's
   builtin takes the indices as arguments, GCC's as an integer vector. */
#if defined(__clang__)
#define cl_vshuf2(W, a, b, ...) __builtin_shufflevector((a), (b), __VA_ARGS__)
#else
#define cl_vshuf2(W, a, b, ...) __builtin_shuffle((a), (b), (cl_i32x##W){__VA_ARGS__})
#endif
/* NaN-propagating max / min of vectors (as cl_max_f32 per lane), branch-free. Macros (GNU
   statement expressions), not functions: a function defined outside a variant's target region
   would pass wide vectors through memory. */
#define cl_vsel(W, m, a, b) ((cl_f32x##W)(((cl_i32x##W)(a) & (m)) | ((cl_i32x##W)(b) & ~(m))))
#define cl_vmax(W, a, b) ({ cl_f32x##W cl_a_ = (a), cl_b_ = (b); cl_vsel(W, (cl_a_ >= cl_b_) | (cl_a_ != cl_a_), cl_a_, cl_b_); })
/* Max / min against a bound `c` that is not NaN (a Clip's constant bound; cl_maxc_f32 per
   lane): one comparison and one select. `c` is a scalar, broadcast as `c - 0` (an identity GCC
   folds, where `0 + c` would turn -0 into +0 and cost an add per use). */
#define cl_vmaxc(W, a, c) ({ cl_f32x##W cl_a_ = (a), cl_c_ = (c) - (cl_f32x##W){0}; cl_vsel(W, cl_a_ < cl_c_, cl_c_, cl_a_); })
#define cl_vminc(W, a, c) ({ cl_f32x##W cl_a_ = (a), cl_c_ = (c) - (cl_f32x##W){0}; cl_vsel(W, cl_a_ > cl_c_, cl_c_, cl_a_); })
#define cl_verf(W, x) ({ cl_f32x##W x_ = (x); cl_i32x##W sign_ = (cl_i32x##W)x_ & (int32_t)0x80000000; \
    cl_f32x##W a_ = (cl_f32x##W)((cl_i32x##W)x_ & 0x7fffffff), t_ = CL_ERF_POLY(a_); \
    t_ = t_ * t_; t_ = t_ * t_; t_ = t_ * t_; t_ = t_ * t_; \
    cl_f32x##W big_ = (cl_f32x##W)((cl_i32x##W)(1.0f - 1.0f / t_) | sign_), small_ = CL_ERF_SMALL(x_, x_ * x_); \
    cl_vsel(W, a_ < 0.5f, small_, big_); })
#define cl_vexp(W, x) ({ cl_f32x##W x_ = (x); \
    x_ = cl_vsel(W, x_ < -104.0f, (cl_f32x##W){0} - 104.0f, x_); \
    x_ = cl_vsel(W, x_ > 89.0f, (cl_f32x##W){0} + 89.0f, x_); \
    cl_f32x##W t_ = x_ * 1.44269504f + 12582912.0f, n_ = t_ - 12582912.0f; \
    cl_f32x##W r_ = x_ - n_ * 0.693145752f - n_ * 1.42860677e-6f; \
    cl_i32x##W k_ = (cl_i32x##W)t_ - 0x4B400000, k1_ = k_ >> 1; \
    CL_EXP_POLY(r_) * (cl_f32x##W)((k1_ + 127) << 23) * (cl_f32x##W)((k_ - k1_ + 127) << 23); })
#define cl_vmin(W, a, b) ({ cl_f32x##W cl_a_ = (a), cl_b_ = (b); cl_vsel(W, (cl_a_ <= cl_b_) | (cl_a_ != cl_a_), cl_a_, cl_b_); })
