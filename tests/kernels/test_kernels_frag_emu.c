/* Emulated fragments (debug-emulate-coopmat, backend-spirv/spv_frag_emu.c) on a Vulkan
 * device without cooperative matrices (lavapipe in CI): loads from buffers and workgroup
 * memory in both layouts, chained products, a loop of many chunks (lavapipe ends a
 * shader's loops after 65535 iterations in all, which a slot a loop iteration passed),
 * each subgroup on its own data, element-wise mul_add, stores; against the host in f64. */
#include "kernels/kernels.h"
#include "kernels/kn_common.h"
#include "kernels/kn_expr.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define SUBGROUPS 2

typedef struct emu_case {
    uint32_t reps;  /* A_r B_r products summed */
    bool looped;    /* inside an IR loop (else unrolled) */
    bool via_shm;   /* A staged through workgroup memory behind barriers */
    bool col_b;     /* B read column-major */
    bool mul_add;   /* then acc * acc + acc element by element */
} emu_case;

/* Subgroup s: acc = sum_r A[s][r] B[r] (16 x 16 x 16, f16), stored at Y[s]. */
static ir_kernel *build(const rt_caps *c, const emu_case *ec) {
    kiln_err err = {0};
    kx k = {kn_create("frag_emu_probe", &err), c};
    cr_assert_not_null(k.ir, "%s", err.msg);
    uint32_t per = 256 * ec->reps;
    ir_buf a = kx_buffer(k, "A", IR_F16, IR_READ, SUBGROUPS * per), b = kx_buffer(k, "B", IR_F16, IR_READ, per);
    ir_buf y = kx_buffer(k, "Y", IR_F32, IR_WRITE, SUBGROUPS * 256);
    kx_workgroup(k, SUBGROUPS * c->subgroup_size);
    ir_shm sa = ec->via_shm ? kx_shared(k, "sa", IR_F16, SUBGROUPS * 256) : 0;
    ir_type ta = ir_t_frag(k.ir, IR_FRAG_A, IR_F16, 16, 16, 16), tb = ir_t_frag(k.ir, IR_FRAG_B, IR_F16, 16, 16, 16);
    ir_type tc = ir_t_frag(k.ir, IR_FRAG_ACC, IR_F32, 16, 16, 16);
    ir_val acc = ir_frag_fill(k.ir, tc, kx_f32(k, 0.0f)), st = kx_u32(k, 16), sg = kx_sg_id(k);
    ir_for *l = NULL;
    for (uint32_t r = 0; r < (ec->looped ? 1 : ec->reps); r++) {
        ir_val rep = kx_u32(k, r), c0 = acc;
        if (ec->looped) {
            l = ir_for_begin(k.ir, kx_u32(k, 0), kx_u32(k, ec->reps), kx_u32(k, 1), 1, &acc);
            rep = ir_for_iv(l), c0 = ir_for_arg(l, 0);
        }
        ir_val a_at = kx_add(k, kx_mul_c(k, sg, per), kx_mul_c(k, rep, 256)), fa;
        if (ec->via_shm) { /* the workgroup stages both subgroups' A */
            ir_val lid = kx_local(k), n_inv = kx_u32(k, SUBGROUPS * c->subgroup_size), i;
            kx_barrier(k);
            ir_for *s = kx_for(k, lid, kx_u32(k, SUBGROUPS * 256), n_inv, &i);
            ir_val src = kx_add(k, kx_mul_c(k, kx_div_c(k, i, 256), per), kx_add(k, kx_mul_c(k, rep, 256), kx_rem_c(k, i, 256)));
            kx_shm_store(k, sa, i, kx_load(k, a, src, 1));
            kx_end_for(k, s);
            kx_barrier(k);
            fa = ir_frag_load(k.ir, ta, true, sa, kx_mul_c(k, sg, 256), st, true);
        } else {
            fa = ir_frag_load(k.ir, ta, false, a, a_at, st, true);
        }
        ir_val fb = ir_frag_load(k.ir, tb, false, b, kx_mul_c(k, rep, 256), st, !ec->col_b);
        ir_val next = ir_frag_mma(k.ir, fa, fb, c0);
        if (ec->looped) {
            ir_for_end(k.ir, l, &next);
            acc = ir_for_result(l, 0);
        } else {
            acc = next;
        }
    }
    if (ec->mul_add) acc = ir_frag_mul_add(k.ir, acc, acc, acc);
    ir_frag_store(k.ir, acc, false, y, kx_mul_c(k, sg, 256), st, true);
    ir_kernel *kern = kn_finish(k.ir, &err);
    cr_assert_not_null(kern, "%s", err.msg);
    return kern;
}

static void run_case(rt_device *d, const emu_case *ec) {
    uint32_t per = 256 * ec->reps;
    ir_kernel *k = build(&d->caps, ec);
    float *af, *bf, *out = malloc(SUBGROUPS * 256 * 4), *nan = malloc(SUBGROUPS * 256 * 4);
    for (int i = 0; i < SUBGROUPS * 256; i++) nan[i] = NAN;
    uint16_t *av = tu_rand16(IR_F16, SUBGROUPS * per, -1, 1, &af), *bv = tu_rand16(IR_F16, per, -1, 1, &bf);
    rt_buffer *ba = tu_vk_upload(d, av, SUBGROUPS * per * 2), *bb = tu_vk_upload(d, bv, per * 2);
    rt_buffer *by = tu_vk_upload(d, nan, SUBGROUPS * 256 * 4);
    rt_arg args[3] = {{ba, 0}, {bb, 0}, {by, 0}};
    tu_vk_launch(d, k, 1, 1, args, 3);
    tu_vk_download(d, by, out, SUBGROUPS * 256 * 4);
    for (uint32_t s = 0; s < SUBGROUPS; s++)
        for (uint32_t i = 0; i < 16; i++)
            for (uint32_t j = 0; j < 16; j++) {
                double want = 0, mag = 0;
                for (uint32_t r = 0; r < ec->reps; r++)
                    for (uint32_t kk = 0; kk < 16; kk++) {
                        double p = (double)af[s * per + r * 256 + i * 16 + kk] *
                                   bf[r * 256 + (ec->col_b ? j * 16 + kk : kk * 16 + j)];
                        want += p, mag += fabs(p);
                    }
                double tol = 16.0 * ec->reps * ldexp(1.0, -24) * mag;
                if (ec->mul_add) tol = 3 * tol * (fabs(want) + 1) + 4 * ldexp(1.0, -24) * want * want, want += want * want;
                float got = out[s * 256 + i * 16 + j];
                cr_assert(fabs(got - want) <= tol + 1e-30, "reps %u looped %d shm %d col_b %d mul_add %d: Y[%u][%u][%u] = %.9g, want %.9g",
                          ec->reps, ec->looped, ec->via_shm, ec->col_b, ec->mul_add, s, i, j, got, want);
            }
    d->ops->release(d, ba), d->ops->release(d, bb), d->ops->release(d, by);
    free(av), free(bv), free(af), free(bf), free(out), free(nan);
    ir_kernel_destroy(k);
}

static rt_device *emulated_or_skip(void) {
    rt_device *d = tu_vk_open_or_skip("debug-emulate-coopmat");
    if (!d->caps.mma_emulated) {
        d->ops->destroy(d);
        cr_skip_test("the device has cooperative matrices (or lacks f16): nothing is emulated");
    }
    return d;
}

Test(kernels_frag_emu, products_loads_and_stores_match_the_host, .timeout = 600) {
    rt_device *d = emulated_or_skip();
    tu_seed(41);
    static const emu_case cases[] = {
        {1, false, false, false, false}, {3, false, false, true, false}, {3, true, false, false, true},
        {2, false, true, true, false},   {3, true, true, false, false},
        {300, true, false, true, false}, /* 300 chunks: past lavapipe's 65535 iterations at a slot an iteration */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(d, &cases[i]);
    d->ops->destroy(d);
}

/* The switch is refused nowhere and changes nothing where cooperative matrices exist or
 * f16 does not; no-coopmat after it takes the emulated shapes away again. */
Test(kernels_frag_emu, the_switch_adds_f16_fragments_only_where_none_are) {
    rt_caps c;
    tu_caps_min(&c);
    c.f16_arith = true, c.shared_bytes = 32768, c.subgroup_size = 8;
    kiln_err err = {0};
    rt_caps e = c;
    cr_assert_eq(rt_caps_override(&e, "debug-emulate-coopmat", &err), 0, "%s", err.msg);
    cr_assert(e.mma_emulated && e.n_mma == 1 && e.mma[0].ab_type == IR_F16 && e.mma[0].m == 16);
    cr_assert_eq(e.shared_bytes + e.mma_emulated_shared, c.shared_bytes, "the scratch comes out of shared_bytes");
    rt_caps h;
    tu_caps_h200(&h);
    rt_caps h2 = h;
    cr_assert_eq(rt_caps_override(&h2, "debug-emulate-coopmat", &err), 0, "%s", err.msg);
    cr_assert(!h2.mma_emulated && h2.n_mma == h.n_mma, "a device with cooperative matrices keeps its own");
    rt_caps n = c;
    n.f16_arith = false;
    cr_assert_eq(rt_caps_override(&n, "debug-emulate-coopmat", &err), 0, "%s", err.msg);
    cr_assert(!n.mma_emulated && !n.n_mma, "no f16: nothing to emulate");
    e = c;
    cr_assert_eq(rt_caps_override(&e, "debug-emulate-coopmat,no-coopmat", &err), 0, "%s", err.msg);
    cr_assert(!e.mma_emulated && !e.n_mma);
    cr_assert_neq(rt_caps_override(&e, "debug-emulate-coopmat=1", &err), 0, "takes no value");
    cr_assert_eq(rt_caps_override_check("debug-emulate-coopmat", &err), 0, "%s", err.msg);
}
