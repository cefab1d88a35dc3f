
#ifndef CL_DNNL_PRIMS
#define CL_DNNL_PRIMS
/* oneDNN primitives (`dnnl` backend, oneDNN 2.x C API): convolution with bias and sum / ReLU
 * post-ops, max and average pooling, over the model's plain NCHW activations and (G)OIHW
 * weights. A convolution runs in the layouts oneDNN prefers (blocked, for its direct JIT
 * kernels), converting its input and output on every call and its weights once.
 *
 * Every primitive of a model is created up front in a `cl_dnnl_lib` (one per model instance,
 * built by `collage_<model>_lib_new`, or a process-wide one behind a mutex for callers without
 * an instance); `run` only binds pointers and executes, in the model's order, on the
 * instance's stream. oneDNN runs its own OpenMP threads: the count is the runtime's, set on the
 * calling thread for creation and for every execution and restored afterwards. Reorders, like
 * the primitives, get their scratchpads up front, so an instance may run on any thread. The
 * engine, and the process-wide state of callers without an instance, live until the process
 * ends (a shared library of generated code that is unloaded leaves them behind).
 *
 * A oneDNN error prints one line naming the model's site and aborts: the compiler only places
 * geometries oneDNN accepts, so a failure here is a compiler bug, not a user error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <dnnl.h>

void omp_set_num_threads(int) __attribute__((weak));
int omp_get_max_threads(void) __attribute__((weak));
void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags)
    __attribute__((weak));

/* A model with oneDNN primitives runs its own parallel loops on OpenMP's team too: oneDNN's
 * workers spin-wait for their next region after each primitive, and a second pool beside them
 * would fight them for the cores (SqueezeNet, 2 threads: 61 ms against 9.5 ms). Chunks are
 * taken from a shared counter, as on the runtime's pool. */
typedef struct {
    collage_task task;
    void *ctx;
    int64_t n, chunk, next;
} cl_omp_job_;

static inline void cl_omp_body_(void *data) {
    cl_omp_job_ *j = (cl_omp_job_ *)data;
    for (;;) {
        int64_t b = __atomic_fetch_add(&j->next, j->chunk, __ATOMIC_RELAXED);
        if (b >= j->n) break;
        int64_t e = b + j->chunk < j->n ? b + j->chunk : j->n;
        j->task(j->ctx, b, e);
    }
}

/* `parallel_for` on `pool` OpenMP threads (the pool pointer carries the count). */
static inline void cl_omp_parallel_for_(const void *pool, int64_t n, collage_task task, void *ctx) {
    int64_t threads = (int64_t)(intptr_t)pool;
    if (n <= 0) return;
    if (threads > n) threads = n;
    if (threads <= 1) {
        task(ctx, 0, n);
        return;
    }
    cl_omp_job_ j = {task, ctx, n, (n + threads * 4 - 1) / (threads * 4), 0};
    GOMP_parallel(cl_omp_body_, &j, (unsigned)threads, 0);
}

enum {
    CL_DNNL_CONV = 0,
    CL_DNNL_MAXPOOL = 1,
    CL_DNNL_AVGPOOL_EXCLUDE = 2,
    CL_DNNL_AVGPOOL_INCLUDE = 3
};

/* One primitive: its kind, ONNX geometry (dilations from 1) and the post-ops it fuses. */
typedef struct {
    int kind;
    int64_t n, ic, ih, iw, oc, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, groups;
    int bias, post_sum, post_relu;
    int wei_const; /* weights are a model constant: converted once, not on every call */
    /* The sites producing this one's input and residual (-1: none), and whether this one's
     * output may stay in the convolution's layout for its readers (all of them sites). */
    int src_from, res_from, blockable;
} cl_dnnl_desc;

struct cl_dnnl_site_;
/* A primitive and its memories. User memories (plain layouts; their handles are set on every
 * call): mem[0..nmem) with execution arguments args[]. A convolution chooses its own (blocked)
 * layouts: `blk[i]` is the primitive's src / weights / dst memory when that layout differs from
 * the plain one (weights allocated with it, src and dst placed by cl_dnnl_place_), and
 * `reorder[i]` converts (src, weights: plain to blocked; dst: blocked to plain; `res_in`: a
 * residual, plain, into the blocked dst for the sum post-op). Constant weights are converted on
 * the first call (again only if their address changes), other weights on every call. */
typedef struct cl_dnnl_site_ {
    dnnl_primitive_t prim;
    dnnl_memory_t mem[4];
    int args[4];
    int nmem;
    dnnl_memory_t blk[3];
    dnnl_primitive_t reorder[3];
    dnnl_primitive_t res_in;
    dnnl_memory_t rscratch[4]; /* scratchpads of reorder[0..3) and res_in (NULL: none needed) */
    const void *wei_from;
    int wei_const;
    int64_t dst_bytes;
    dnnl_memory_t scratch; /* the primitive's scratchpad, allocated with it */
    /* Layout hand-over (set by cl_dnnl_lib_build): the producers whose converted output this
     * site reads directly as input / copies as residual, and whether this site must still
     * write its plain output (some reader needs it). */
    const struct cl_dnnl_site_ *src_site, *res_site;
    int write_plain;
} cl_dnnl_site;

typedef struct {
    int64_t threads;
    dnnl_stream_t stream;
    int nsites;
    cl_dnnl_site *sites;
    /* Buffers shared by every site's converted input, and by the converted outputs that are
     * converted back right away (outputs handed over to readers keep their own). */
    dnnl_memory_t tmp[2];
} cl_dnnl_lib;

static dnnl_engine_t cl_dnnl_engine_;
static pthread_once_t cl_dnnl_engine_once_ = PTHREAD_ONCE_INIT;

static inline void cl_dnnl_check_(dnnl_status_t st, int site, const char *fn) {
    if (st != dnnl_success) {
        fprintf(stderr, "collage dnnl: primitive %d: %s failed (status %d)\n", site, fn, (int)st);
        fflush(stderr);
        abort();
    }
}
#define CL_DNNL_TRY(site, fn, args) cl_dnnl_check_(fn args, (site), #fn)

static inline void cl_dnnl_engine_init_(void) {
    CL_DNNL_TRY(-1, dnnl_engine_create, (&cl_dnnl_engine_, dnnl_cpu, 0));
}

/* Unloading the library (or the process ending) destroys the engine: every `dlclose` of a model
 * leaked one before. Priority 101 runs after the default-priority destructors, which free the
 * models' process-wide states built on it. */
__attribute__((destructor(101))) static void cl_dnnl_engine_fini_(void) {
    if (cl_dnnl_engine_ != NULL) dnnl_engine_destroy(cl_dnnl_engine_);
    cl_dnnl_engine_ = NULL;
}

/* Sets the calling thread's OpenMP team size for oneDNN; returns the previous one. */
static inline int cl_dnnl_threads_(int64_t threads) {
    int old = omp_get_max_threads ? omp_get_max_threads() : 0;
    if (omp_set_num_threads && threads > 0) omp_set_num_threads((int)threads);
    return old;
}

static inline void cl_dnnl_restore_threads_(int old) {
    if (omp_set_num_threads && old > 0) omp_set_num_threads(old);
}

/* A reorder `from` -> `to` with its own scratchpad (allocated here, if it needs one), so that
 * it runs on any thread, like the primitives. */
static inline void cl_dnnl_reorder_make_(int site, const dnnl_memory_desc_t *from,
                                         const dnnl_memory_desc_t *to, dnnl_primitive_t *r,
                                         dnnl_memory_t *scratch) {
    dnnl_primitive_attr_t attr;
    dnnl_primitive_desc_t rpd;
    const dnnl_memory_desc_t *smd;
    CL_DNNL_TRY(site, dnnl_primitive_attr_create, (&attr));
    CL_DNNL_TRY(site, dnnl_primitive_attr_set_scratchpad_mode, (attr, dnnl_scratchpad_mode_user));
    CL_DNNL_TRY(site, dnnl_reorder_primitive_desc_create,
                (&rpd, from, cl_dnnl_engine_, to, cl_dnnl_engine_, attr));
    CL_DNNL_TRY(site, dnnl_primitive_create, (r, rpd));
    smd = dnnl_primitive_desc_query_md(rpd, dnnl_query_scratchpad_md, 0);
    if (smd != NULL && dnnl_memory_desc_get_size(smd) > 0)
        CL_DNNL_TRY(site, dnnl_memory_create, (scratch, smd, cl_dnnl_engine_, DNNL_MEMORY_ALLOCATE));
    CL_DNNL_TRY(site, dnnl_primitive_desc_destroy, (rpd));
    CL_DNNL_TRY(site, dnnl_primitive_attr_destroy, (attr));
}

/* For each convolution operand (0 src, 1 weights, 2 dst) whose layout chosen by `pd` differs
 * from the plain `md[i]`: a memory in that layout and the reorder into it (dst: out of it; with
 * `sum`, also a reorder bringing the residual into it). */
static inline void cl_dnnl_convert_(cl_dnnl_site *s, int site, const_dnnl_primitive_desc_t pd,
                                    const dnnl_memory_desc_t *md, int sum) {
    static const dnnl_query_t q[3] = {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md};
    int i;
    for (i = 0; i < 3; i++) {
        const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(pd, q[i], 0);
        if (dnnl_memory_desc_equal(want, &md[i])) continue;
        /* Weights are converted once and kept; input and output buffers are placed by
         * cl_dnnl_lib_build once it knows which outputs are handed over. */
        CL_DNNL_TRY(site, dnnl_memory_create,
                    (&s->blk[i], want, cl_dnnl_engine_,
                     i == 1 ? DNNL_MEMORY_ALLOCATE : DNNL_MEMORY_NONE));
        if (i < 2)
            cl_dnnl_reorder_make_(site, &md[i], want, &s->reorder[i], &s->rscratch[i]);
        else
            cl_dnnl_reorder_make_(site, want, &md[i], &s->reorder[i], &s->rscratch[i]);
        if (i == 2 && sum) cl_dnnl_reorder_make_(site, &md[i], want, &s->res_in, &s->rscratch[3]);
    }
}

static inline void cl_dnnl_make_(cl_dnnl_site *s, int site, const cl_dnnl_desc *d) {
    dnnl_memory_desc_t md[4];
    dnnl_dims_t src = {d->n, d->ic, d->ih, d->iw}, dst = {d->n, d->oc, d->oh, d->ow};
    dnnl_dims_t strides = {d->sh, d->sw}, dil = {d->dh - 1, d->dw - 1};
    dnnl_dims_t pad_l = {d->pt, d->pl}, pad_r = {d->pb, d->pr};
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t ops = NULL;
    dnnl_primitive_desc_t pd = NULL;
    int i;
    CL_DNNL_TRY(site, dnnl_primitive_attr_create, (&attr));
    /* The scratchpad is allocated here, with the primitive, not by oneDNN while it runs. */
    CL_DNNL_TRY(site, dnnl_primitive_attr_set_scratchpad_mode, (attr, dnnl_scratchpad_mode_user));
    if (d->post_sum || d->post_relu) {
        CL_DNNL_TRY(site, dnnl_post_ops_create, (&ops));
        if (d->post_sum) CL_DNNL_TRY(site, dnnl_post_ops_append_sum, (ops, 1.0f));
        if (d->post_relu)
            CL_DNNL_TRY(site, dnnl_post_ops_append_eltwise,
                        (ops, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f));
        CL_DNNL_TRY(site, dnnl_primitive_attr_set_post_ops, (attr, ops));
    }
    CL_DNNL_TRY(site, dnnl_memory_desc_init_by_tag, (&md[0], 4, src, dnnl_f32, dnnl_nchw));
    if (d->kind == CL_DNNL_CONV) {
        dnnl_convolution_desc_t cd;
        dnnl_dims_t bias = {d->oc};
        if (d->groups > 1) {
            dnnl_dims_t w = {d->groups, d->oc / d->groups, d->ic / d->groups, d->kh, d->kw};
            CL_DNNL_TRY(site, dnnl_memory_desc_init_by_tag, (&md[1], 5, w, dnnl_f32, dnnl_goihw));
        } else {
            dnnl_dims_t w = {d->oc, d->ic, d->kh, d->kw};
            CL_DNNL_TRY(site, dnnl_memory_desc_init_by_tag, (&md[1], 4, w, dnnl_f32, dnnl_oihw));
        }
        CL_DNNL_TRY(site, dnnl_memory_desc_init_by_tag, (&md[2], 4, dst, dnnl_f32, dnnl_nchw));
        CL_DNNL_TRY(site, dnnl_memory_desc_init_by_tag, (&md[3], 1, bias, dnnl_f32, dnnl_a));
        dnnl_memory_desc_t any[3];
        for (i = 0; i < 3; i++)
            CL_DNNL_TRY(site, dnnl_memory_desc_init_by_tag,
                        (&any[i], md[i].ndims, md[i].dims, dnnl_f32, dnnl_format_tag_any));
        CL_DNNL_TRY(site, dnnl_dilated_convolution_forward_desc_init,
                    (&cd, dnnl_forward_inference, dnnl_convolution_direct, &any[0], &any[1],
                     d->bias ? &md[3] : NULL, &any[2], strides, dil, pad_l, pad_r));
        CL_DNNL_TRY(site, dnnl_primitive_desc_create, (&pd, &cd, attr, cl_dnnl_engine_, NULL));
        s->args[0] = DNNL_ARG_SRC;
        s->args[1] = DNNL_ARG_WEIGHTS;
        s->args[2] = DNNL_ARG_DST;
        s->args[3] = DNNL_ARG_BIAS;
        s->nmem = d->bias ? 4 : 3;
        s->dst_bytes = d->n * d->oc * d->oh * d->ow * (int64_t)sizeof(float);
        cl_dnnl_convert_(s, site, pd, md, d->post_sum);
    } else {
        dnnl_pooling_v2_desc_t pdesc;
        dnnl_dims_t kernel = {d->kh, d->kw};
        dnnl_alg_kind_t alg = d->kind == CL_DNNL_MAXPOOL           ? dnnl_pooling_max
                              : d->kind == CL_DNNL_AVGPOOL_EXCLUDE ? dnnl_pooling_avg_exclude_padding
                                                                   : dnnl_pooling_avg_include_padding;
        CL_DNNL_TRY(site, dnnl_memory_desc_init_by_tag, (&md[1], 4, dst, dnnl_f32, dnnl_nchw));
        CL_DNNL_TRY(site, dnnl_pooling_v2_forward_desc_init,
                    (&pdesc, dnnl_forward_inference, alg, &md[0], &md[1], strides, kernel, dil,
                     pad_l, pad_r));
        CL_DNNL_TRY(site, dnnl_primitive_desc_create, (&pd, &pdesc, attr, cl_dnnl_engine_, NULL));
        s->args[0] = DNNL_ARG_SRC;
        s->args[1] = DNNL_ARG_DST;
        s->nmem = 2;
    }
    CL_DNNL_TRY(site, dnnl_primitive_create, (&s->prim, pd));
    s->wei_const = d->wei_const;
    CL_DNNL_TRY(site, dnnl_memory_create,
                (&s->scratch, dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0),
                 cl_dnnl_engine_, DNNL_MEMORY_ALLOCATE));
    for (i = 0; i < s->nmem; i++)
        CL_DNNL_TRY(site, dnnl_memory_create,
                    (&s->mem[i], &md[i], cl_dnnl_engine_, DNNL_MEMORY_NONE));
    CL_DNNL_TRY(site, dnnl_primitive_desc_destroy, (pd));
    if (ops != NULL) CL_DNNL_TRY(site, dnnl_post_ops_destroy, (ops));
    CL_DNNL_TRY(site, dnnl_primitive_attr_destroy, (attr));
}

/* Destroys what `cl_dnnl_lib_build` created (a zeroed library is left as it is). */
static inline void cl_dnnl_lib_clear(cl_dnnl_lib *L) {
    int i, j;
    if (L->sites == NULL) return;
    for (i = 0; i < L->nsites; i++) {
        cl_dnnl_site *s = &L->sites[i];
        for (j = 0; j < s->nmem; j++)
            if (s->mem[j] != NULL) dnnl_memory_destroy(s->mem[j]);
        for (j = 0; j < 3; j++) {
            if (s->reorder[j] != NULL) dnnl_primitive_destroy(s->reorder[j]);
            if (s->blk[j] != NULL) dnnl_memory_destroy(s->blk[j]);
        }
        if (s->res_in != NULL) dnnl_primitive_destroy(s->res_in);
        for (j = 0; j < 4; j++)
            if (s->rscratch[j] != NULL) dnnl_memory_destroy(s->rscratch[j]);
        if (s->scratch != NULL) dnnl_memory_destroy(s->scratch);
        if (s->prim != NULL) dnnl_primitive_destroy(s->prim);
        memset(s, 0, sizeof *s);
    }
    for (j = 0; j < 2; j++) {
        if (L->tmp[j] != NULL) dnnl_memory_destroy(L->tmp[j]);
        L->tmp[j] = NULL;
    }
    if (L->stream != NULL) dnnl_stream_destroy(L->stream);
    L->stream = NULL;
    L->sites = NULL;
}

/* Places the converted inputs and outputs (see cl_dnnl_lib): temporaries in the two shared
 * buffers, handed-over outputs in their own. */
static inline void cl_dnnl_place_(cl_dnnl_lib *L) {
    size_t need[2] = {0, 0};
    void *at[2] = {NULL, NULL};
    int i, k;
    for (i = 0; i < L->nsites; i++) {
        cl_dnnl_site *s = &L->sites[i];
        const dnnl_memory_desc_t *md;
        for (k = 0; k < 2; k++) {
            dnnl_memory_t m = s->blk[2 * k];
            if (m == NULL || (k == 0 && s->src_site != NULL) || (k == 1 && !s->write_plain))
                continue;
            CL_DNNL_TRY(i, dnnl_memory_get_memory_desc, (m, &md));
            if (dnnl_memory_desc_get_size(md) > need[k]) need[k] = dnnl_memory_desc_get_size(md);
        }
    }
    for (k = 0; k < 2; k++) {
        dnnl_memory_desc_t flat;
        dnnl_dims_t n;
        if (need[k] == 0) continue;
        n[0] = (int64_t)((need[k] + sizeof(float) - 1) / sizeof(float));
        CL_DNNL_TRY(-1, dnnl_memory_desc_init_by_tag, (&flat, 1, n, dnnl_f32, dnnl_a));
        CL_DNNL_TRY(-1, dnnl_memory_create, (&L->tmp[k], &flat, cl_dnnl_engine_, DNNL_MEMORY_ALLOCATE));
        CL_DNNL_TRY(-1, dnnl_memory_get_data_handle, (L->tmp[k], &at[k]));
    }
    for (i = 0; i < L->nsites; i++) {
        cl_dnnl_site *s = &L->sites[i];
        if (s->blk[0] != NULL && s->src_site == NULL)
            CL_DNNL_TRY(i, dnnl_memory_set_data_handle, (s->blk[0], at[0]));
        if (s->blk[2] != NULL && s->write_plain) {
            CL_DNNL_TRY(i, dnnl_memory_set_data_handle, (s->blk[2], at[1]));
        } else if (s->blk[2] != NULL) {
            const dnnl_memory_desc_t *md;
            dnnl_memory_desc_t own;
            CL_DNNL_TRY(i, dnnl_memory_get_memory_desc, (s->blk[2], &md));
            own = *md;
            CL_DNNL_TRY(i, dnnl_memory_destroy, (s->blk[2]));
            CL_DNNL_TRY(i, dnnl_memory_create, (&s->blk[2], &own, cl_dnnl_engine_, DNNL_MEMORY_ALLOCATE));
        }
    }
}

/* Creates the stream and every primitive of `d[0..n]` into `sites` for `threads` threads. */
static inline void cl_dnnl_lib_build(cl_dnnl_lib *L, const cl_dnnl_desc *d, int n, cl_dnnl_site *sites,
                              int64_t threads) {
    int i;
    int old;
    pthread_once(&cl_dnnl_engine_once_, cl_dnnl_engine_init_);
    old = cl_dnnl_threads_(threads);
    L->threads = threads;
    L->nsites = n;
    L->sites = sites;
    CL_DNNL_TRY(-1, dnnl_stream_create, (&L->stream, cl_dnnl_engine_, dnnl_stream_default_flags));
    for (i = 0; i < n; i++) {
        cl_dnnl_make_(&sites[i], i, &d[i]);
        sites[i].write_plain = 1;
    }
    /* Hand converted outputs over where every reader takes exactly that layout. */
    for (i = 0; i < n; i++) {
        const dnnl_memory_desc_t *out, *want;
        int j, ok = 1;
        if (!d[i].blockable || sites[i].blk[2] == NULL) continue;
        CL_DNNL_TRY(i, dnnl_memory_get_memory_desc, (sites[i].blk[2], &out));
        for (j = 0; j < n && ok; j++) {
            if (d[j].src_from == i) {
                ok = sites[j].blk[0] != NULL;
                if (ok) {
                    CL_DNNL_TRY(j, dnnl_memory_get_memory_desc, (sites[j].blk[0], &want));
                    ok = dnnl_memory_desc_equal(out, want);
                }
            }
            if (ok && d[j].res_from == i) {
                ok = sites[j].blk[2] != NULL;
                if (ok) {
                    CL_DNNL_TRY(j, dnnl_memory_get_memory_desc, (sites[j].blk[2], &want));
                    ok = dnnl_memory_desc_equal(out, want);
                }
            }
        }
        if (!ok) continue;
        sites[i].write_plain = 0;
        for (j = 0; j < n; j++) {
            if (d[j].src_from == i) sites[j].src_site = &sites[i];
            if (d[j].res_from == i) sites[j].res_site = &sites[i];
        }
    }
    cl_dnnl_place_(L);
    cl_dnnl_restore_threads_(old);
}

static inline void cl_dnnl_reorder_(const cl_dnnl_lib *L, int site, dnnl_primitive_t r,
                                    dnnl_memory_t scratch, dnnl_memory_t from, dnnl_memory_t to) {
    dnnl_exec_arg_t ea[3];
    ea[0].arg = DNNL_ARG_FROM;
    ea[0].memory = from;
    ea[1].arg = DNNL_ARG_TO;
    ea[1].memory = to;
    ea[2].arg = DNNL_ARG_SCRATCHPAD;
    ea[2].memory = scratch;
    CL_DNNL_TRY(site, dnnl_primitive_execute, (r, L->stream, scratch != NULL ? 3 : 2, ea));
}

/* Runs primitive `site` on (src, weights, dst, bias) (pooling: src, dst) and waits. For the sum
 * post-op, `res` is the residual, which the result is added to. */
static inline void cl_dnnl_exec(cl_dnnl_lib *L, int site, const void *a0, const void *a1, const void *a2,
                         const void *a3, const void *res) {
    cl_dnnl_site *s = &L->sites[site];
    const void *ptr[4] = {a0, a1, a2, a3};
    dnnl_exec_arg_t ea[5];
    int i, old = cl_dnnl_threads_(L->threads);
    for (i = 0; i < s->nmem; i++) {
        CL_DNNL_TRY(site, dnnl_memory_set_data_handle, (s->mem[i], (void *)ptr[i]));
        ea[i].arg = s->args[i];
        ea[i].memory = s->mem[i];
    }
    if (s->src_site != NULL) {
        ea[0].memory = s->src_site->blk[2];
    } else if (s->reorder[0] != NULL) {
        cl_dnnl_reorder_(L, site, s->reorder[0], s->rscratch[0], s->mem[0], s->blk[0]);
        ea[0].memory = s->blk[0];
    }
    if (s->reorder[1] != NULL) {
        if (!s->wei_const || s->wei_from != a1) {
            cl_dnnl_reorder_(L, site, s->reorder[1], s->rscratch[1], s->mem[1], s->blk[1]);
            s->wei_from = a1;
        }
        ea[1].memory = s->blk[1];
    }
    if (s->res_site != NULL) {
        /* The producer's output in this layout: copied as it is. */
        const dnnl_memory_desc_t *md;
        void *from, *to;
        CL_DNNL_TRY(site, dnnl_memory_get_memory_desc, (s->blk[2], &md));
        CL_DNNL_TRY(site, dnnl_memory_get_data_handle, (s->res_site->blk[2], &from));
        CL_DNNL_TRY(site, dnnl_memory_get_data_handle, (s->blk[2], &to));
        memcpy(to, from, dnnl_memory_desc_get_size(md));
    } else if (res != NULL) {
        if (s->res_in != NULL) {
            CL_DNNL_TRY(site, dnnl_memory_set_data_handle, (s->mem[2], (void *)res));
            cl_dnnl_reorder_(L, site, s->res_in, s->rscratch[3], s->mem[2], s->blk[2]);
            CL_DNNL_TRY(site, dnnl_memory_set_data_handle, (s->mem[2], (void *)a2));
        } else if (res != a2) {
            memcpy((void *)a2, res, (size_t)s->dst_bytes);
        }
    }
    if (s->reorder[2] != NULL) ea[2].memory = s->blk[2];
    ea[s->nmem].arg = DNNL_ARG_SCRATCHPAD;
    ea[s->nmem].memory = s->scratch;
    CL_DNNL_TRY(site, dnnl_primitive_execute, (s->prim, L->stream, s->nmem + 1, ea));
    if (s->reorder[2] != NULL && s->write_plain)
        cl_dnnl_reorder_(L, site, s->reorder[2], s->rscratch[2], s->blk[2], s->mem[2]);
    CL_DNNL_TRY(site, dnnl_stream_wait, (L->stream));
    cl_dnnl_restore_threads_(old);
}
#undef CL_DNNL_TRY
#endif
