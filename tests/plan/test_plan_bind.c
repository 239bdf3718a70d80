/* Launches bound by name (plan/plan_bind.h): real kernels from kernels/ at small shapes,
 * bound through plan_bind, the function the plan's recordings use, on a stand-in device
 * whose buffers are only sizes (plan_bind asks the device nothing else); then a real plan
 * on the Vulkan device whose recording meets a short buffer. */
#include "base/error.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "plan/plan.h"
#include "plan/plan_bind.h"
#include "plan/plan_internal.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_dev.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

/* A buffer of the stand-in device: only its size. */
typedef struct fake_buf {
    size_t bytes;
} fake_buf;

static size_t fake_size(rt_device *d, const rt_buffer *b) {
    (void)d;
    return ((const fake_buf *)(const void *)b)->bytes;
}

static const rt_device_ops fake_ops = {.size = fake_size};
static rt_device fake_dev = {.ops = &fake_ops};
#define BUF(fb) ((rt_buffer *)(void *)&(fb))

/* The signature of a kernel a builder made (the test fails on a NULL kernel). */
static plan_sig sig_of(ir_kernel *k, const char *role, const char *err) {
    cr_assert_not_null(k, "%s", err);
    plan_sig s;
    kiln_err e = {0};
    cr_assert_eq(plan_sig_capture(k, role, &s, &e), 0, "%s", e.msg);
    ir_kernel_destroy(k);
    return s;
}

/* plan_bind on the stand-in device: 0 with the positional arguments in out (freed by the
 * caller), or -1 with err. */
static int bind(const plan_sig *s, uint32_t gx, uint32_t gy, const plan_arg *args, uint32_t n, rt_arg **out,
                kiln_err *err) {
    const uint32_t groups[3] = {gx, gy, 1};
    return plan_bind(&fake_dev, s, groups, args, n, out, err);
}

#define N_ARGS(a) ((uint32_t)(sizeof(a) / sizeof(a)[0]))

/* A bind that must fail, with a message naming every one of want (NULL-ended). */
static void refused(const plan_sig *s, uint32_t gx, uint32_t gy, const plan_arg *args, uint32_t n,
                    const char *const *want) {
    kiln_err err = {0};
    rt_arg sentinel, *out = &sentinel; /* must come back NULL */
    cr_assert_eq(bind(s, gx, gy, args, n, &out, &err), -1, "bound what it must refuse");
    cr_assert_null(out);
    for (const char *const *w = want; *w; w++) cr_assert(strstr(err.msg, *w), "'%s' not in: %s", *w, err.msg);
}

/* decode_o at a small shape: W [64][32], x [32], y and res [64], all bf16 (W as packed
 * pairs where the caps read it so: its bytes are the same). */
typedef struct mv_case {
    plan_sig sig;
    fake_buf W, x, y, res;
} mv_case;

static mv_case decode_o(void) {
    rt_caps c;
    tu_caps_min(&c);
    kiln_err err = {0};
    uint32_t gx;
    mv_case m = {sig_of(kn_matvec(&c, 64, 32, IR_BF16, IR_BF16, KN_EPI_RESIDUAL, &gx, &err), "decode_o",
                        err.msg),
                 {64 * 32 * 2}, {32 * 2}, {64 * 2}, {64 * 2}};
    cr_assert_str_eq(m.sig.kernel, "kn_matvec");
    cr_assert_eq(m.sig.n_params, 4);
    return m;
}

Test(plan_bind, binds_by_name_in_any_order) {
    mv_case m = decode_o();
    /* given in another order than declared: the names place them */
    plan_arg a[] = {{"res", BUF(m.res)}, {"y", BUF(m.y)}, {"x", BUF(m.x)}, {"W", BUF(m.W)}};
    rt_arg *out = NULL;
    kiln_err err = {0};
    cr_assert_eq(bind(&m.sig, 4, 1, a, N_ARGS(a), &out, &err), 0, "%s", err.msg);
    const char *order[] = {"W", "x", "y", "res"};
    rt_buffer *want[] = {BUF(m.W), BUF(m.x), BUF(m.y), BUF(m.res)};
    for (uint32_t i = 0; i < 4; i++) {
        cr_assert_str_eq(m.sig.param[i].name, order[i]);
        cr_assert_eq(out[i].buf, want[i], "argument %u", i);
        cr_assert_eq(out[i].bits, 0);
    }
    free(out);
    /* y and res swapped (one type, one size): bound as named, not as before */
    plan_arg s[] = {{"W", BUF(m.W)}, {"x", BUF(m.x)}, {"y", BUF(m.res)}, {"res", BUF(m.y)}};
    cr_assert_eq(bind(&m.sig, 4, 1, s, N_ARGS(s), &out, &err), 0, "%s", err.msg);
    cr_assert(out[2].buf == BUF(m.res) && out[3].buf == BUF(m.y));
    free(out);
    plan_sig_free(&m.sig);
}

Test(plan_bind, unknown_name) {
    mv_case m = decode_o();
    /* the matmul's name for the activation, not the matvec's */
    plan_arg a[] = {{"W", BUF(m.W)}, {"X", BUF(m.x)}, {"y", BUF(m.y)}, {"res", BUF(m.res)}};
    refused(&m.sig, 4, 1, a, N_ARGS(a),
            (const char *const[]){"decode_o (kn_matvec)", "no parameter named 'X'", "W x y res", NULL});
    plan_sig_free(&m.sig);
}

Test(plan_bind, missing_parameter) {
    mv_case m = decode_o();
    plan_arg a[] = {{"W", BUF(m.W)}, {"x", BUF(m.x)}, {"y", BUF(m.y)}};
    refused(&m.sig, 4, 1, a, N_ARGS(a), (const char *const[]){"decode_o (kn_matvec)", "'res' is left unbound", NULL});
    plan_sig_free(&m.sig);
}

Test(plan_bind, duplicate) {
    mv_case m = decode_o();
    plan_arg a[] = {{"W", BUF(m.W)}, {"x", BUF(m.x)}, {"y", BUF(m.y)}, {"x", BUF(m.x)}, {"res", BUF(m.res)}};
    refused(&m.sig, 4, 1, a, N_ARGS(a), (const char *const[]){"decode_o (kn_matvec)", "'x' is bound twice", NULL});
    plan_sig_free(&m.sig);
}

Test(plan_bind, no_buffer) {
    mv_case m = decode_o();
    plan_arg a[] = {{"W", BUF(m.W)}, {"x", BUF(m.x)}, {"y", BUF(m.y)}, {"res", NULL}};
    refused(&m.sig, 4, 1, a, N_ARGS(a),
            (const char *const[]){"decode_o (kn_matvec)", "'res' is bound to no buffer", NULL});
    plan_sig_free(&m.sig);
}

/* Each buffer at exactly its extent binds; one bf16 short (half an element where W and x
 * are read as packed u32 pairs), it is refused. */
Test(plan_bind, too_small_by_one_element) {
    mv_case m = decode_o();
    fake_buf *b[] = {&m.W, &m.x, &m.y, &m.res};
    const char *name[] = {"W", "x", "y", "res"};
    for (int i = 0; i < 4; i++) {
        plan_arg a[] = {{"W", BUF(m.W)}, {"x", BUF(m.x)}, {"y", BUF(m.y)}, {"res", BUF(m.res)}};
        rt_arg *out = NULL;
        kiln_err err = {0};
        char what[64];
        cr_assert_eq(bind(&m.sig, 4, 1, a, N_ARGS(a), &out, &err), 0, "%s", err.msg);
        free(out);
        b[i]->bytes -= 2;
        snprintf(what, sizeof what, "the buffer bound to '%s' holds %zu bytes", name[i], b[i]->bytes);
        refused(&m.sig, 4, 1, a, N_ARGS(a), (const char *const[]){"decode_o (kn_matvec)", what, NULL});
        b[i]->bytes += 2;
    }
    plan_sig_free(&m.sig);
}

/* rmsnorm's rows follow the grid (one per workgroup): a buffer of 5 rows binds a launch
 * of 5 workgroups, not of 6; a row less one element not even 5. */
Test(plan_bind, too_small_at_the_grid_edge) {
    rt_caps c;
    tu_caps_min(&c);
    kiln_err err = {0};
    plan_sig s = sig_of(kn_rmsnorm(&c, 64, IR_BF16, 1e-5f, &err), "rmsnorm", err.msg);
    fake_buf x = {5 * 64 * 2}, w = {64 * 2}, y = {6 * 64 * 2};
    plan_arg a[] = {{"x", BUF(x)}, {"w", BUF(w)}, {"y", BUF(y)}};
    rt_arg *out = NULL;
    cr_assert_eq(bind(&s, 5, 1, a, N_ARGS(a), &out, &err), 0, "%s", err.msg);
    free(out);
    refused(&s, 6, 1, a, N_ARGS(a),
            (const char *const[]){"rmsnorm (kn_rmsnorm)", "'x' holds 640 bytes", "6x1x1 workgroups reads 384 bf16",
                                  NULL});
    x.bytes -= 2;
    refused(&s, 5, 1, a, N_ARGS(a), (const char *const[]){"rmsnorm (kn_rmsnorm)", "'x' holds 638 bytes", NULL});
    plan_sig_free(&s);
    /* and along y: embed's output rows are the grid's y */
    uint32_t gx;
    s = sig_of(kn_embed(&c, 100, 64, IR_BF16, &gx, &err), "embed", err.msg);
    fake_buf table = {100 * 64 * 2}, tok = {3 * 4}, o = {3 * 64 * 2};
    plan_arg e[] = {{"table", BUF(table)}, {"tok", BUF(tok)}, {"out", BUF(o)}};
    cr_assert_eq(bind(&s, gx, 3, e, N_ARGS(e), &out, &err), 0, "%s", err.msg);
    free(out);
    refused(&s, gx, 4, e, N_ARGS(e), (const char *const[]){"embed (kn_embed)", "'tok' holds 12 bytes", NULL});
    plan_sig_free(&s);
}

/* The device conformance kernel declares no extents; given them, its scalars remain. */
Test(plan_bind, no_extent_and_scalars) {
    ir_kernel *k = tu_dev_axpy_kernel();
    ir_buffer_extent(k, 0, 16); /* a */
    ir_buffer_extent(k, 2, 16); /* y; x declares none */
    plan_sig s = sig_of(k, "axpy_role", "");
    fake_buf a = {64}, x = {64}, y = {64};
    plan_arg args[] = {{"a", BUF(a)}, {"x", BUF(x)}, {"y", BUF(y)}};
    refused(&s, 1, 1, args, N_ARGS(args), (const char *const[]){"axpy_role (axpy)", "'x' declares no extent", NULL});
    plan_sig_free(&s);
    k = tu_dev_axpy_kernel();
    for (ir_buf b = 0; b < 3; b++) ir_buffer_extent(k, b, 16);
    s = sig_of(k, "axpy_role", "");
    refused(&s, 1, 1, args, N_ARGS(args),
            (const char *const[]){"axpy_role (axpy)", "scalar parameter 'n'", "binds buffers only", NULL});
    plan_sig_free(&s);
}

/* A real plan's own recording, a buffer swapped for one an element short: refused with
 * the role, kernel and parameter; the launches recorded before it go with the plan. */
Test(plan_bind, a_plan_refuses_a_short_buffer) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    kiln_err err = {0};
    kiln_err me = {0};
    model *m = model_load(tu_data_file("models/stories260K.gguf"), &me);
    cr_assert_not_null(m, "%s", me.msg);
    engine *e = plan_create(m, d, GGUF_T_BF16, 256, 64, &err);
    cr_assert_not_null(e, "%s", err.msg);
    plan_engine *p = (plan_engine *)e;
    size_t part = d->ops->size(d, p->part), att = d->ops->size(d, p->att);
    rt_buffer *short_part = d->ops->alloc(d, part - 4, &err), *keep = p->part; /* f32: 4 bytes */
    cr_assert_not_null(short_part, "%s", err.msg);
    uint32_t n0 = p->n_launch;
    p->part = short_part;
    cr_assert_eq(plan_record_decode(p, &err), -1);
    cr_assert(strstr(err.msg, "attn_decode (kn_attn_decode") && strstr(err.msg, "'part'"), "%s", err.msg);
    cr_assert_gt(p->n_launch, n0, "the launches before attn_decode are recorded");
    p->part = keep;
    d->ops->release(d, short_part);
    /* the prefill attention writes att (its out) first: one bf16 short */
    rt_buffer *short_att = d->ops->alloc(d, att - 2, &err);
    cr_assert_not_null(short_att, "%s", err.msg);
    keep = p->att;
    p->att = short_att;
    cr_assert_eq(plan_record_prefill(p, NULL, &err), -1);
    cr_assert(strstr(err.msg, "attn_prefill (kn_attn_prefill)") && strstr(err.msg, "'out'"), "%s", err.msg);
    p->att = keep;
    d->ops->release(d, short_att);
    engine_destroy(e); /* frees every launch recorded, the partial ones too (ASan) */
    model_free(m);
    d->ops->destroy(d);
}
