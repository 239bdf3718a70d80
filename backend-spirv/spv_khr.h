/* SPIR-V values newer than Debian 12's spirv-headers (1.3.239): SPV_KHR_cooperative_matrix
 * and SPV_KHR_bfloat16. Values from the SPIR-V registry (KhronosGroup/SPIRV-Headers,
 * include/spirv/unified1/spirv.core.grammar.json and spirv.h, 2026-08); the extension
 * specs are SPV_KHR_cooperative_matrix.asciidoc and SPV_KHR_bfloat16.asciidoc. */
#ifndef KILN_BACKEND_SPIRV_SPV_KHR_H
#define KILN_BACKEND_SPIRV_SPV_KHR_H

enum {
    /* SPV_KHR_cooperative_matrix */
    spv_op_type_coopmat_khr = 4456,   /* OpTypeCooperativeMatrixKHR: component, scope, rows, cols, use (ids) */
    spv_op_coopmat_load_khr = 4457,   /* result type, result, pointer, layout, [stride], [memory operands] */
    spv_op_coopmat_store_khr = 4458,  /* pointer, object, layout, [stride], [memory operands] */
    spv_op_coopmat_muladd_khr = 4459, /* result type, result, A, B, C, [cooperative matrix operands] */
    spv_cap_coopmat_khr = 6022,       /* CooperativeMatrixKHR */
    spv_coopmat_use_a = 0,            /* CooperativeMatrixUse MatrixAKHR */
    spv_coopmat_use_b = 1,            /* MatrixBKHR */
    spv_coopmat_use_acc = 2,          /* MatrixAccumulatorKHR */
    spv_coopmat_row_major = 0,        /* CooperativeMatrixLayout RowMajorKHR */
    spv_coopmat_col_major = 1,        /* ColumnMajorKHR */

    /* SPV_KHR_bfloat16: OpTypeFloat 16 takes an FPEncoding operand */
    spv_fp_encoding_bfloat16 = 0,        /* FPEncoding BFloat16KHR */
    spv_cap_bfloat16_type = 5116,        /* BFloat16TypeKHR */
    spv_cap_bfloat16_coopmat = 5118,     /* BFloat16CooperativeMatrixKHR */

    /* SPV_NV_cooperative_matrix2 and SPV_NV_tensor_addressing (their asciidoc specs):
     * workgroup scope needs the extension only; tensor-addressed loads these */
    spv_op_coopmat_load_tensor_nv = 5367, /* result type, result, pointer, object, layout, memory operand,
                                           * tensor addressing operands (mask, then a view with bit 0) */
    spv_op_type_tensor_layout_nv = 5370,  /* result, dim, clamp mode (constant ids) */
    spv_op_type_tensor_view_nv = 5371,    /* result, dim, has dimensions, p0 .. p(dim-1) (constant ids) */
    spv_op_create_tensor_layout_nv = 5372,
    spv_op_tensor_layout_set_dimension_nv = 5373, /* result type, result, layout, dim0 .. */
    spv_op_tensor_layout_slice_nv = 5375,         /* result type, result, layout, offset0, span0, .. */
    spv_op_create_tensor_view_nv = 5377,
    spv_cap_coopmat_tensor_addressing_nv = 5433, /* CooperativeMatrixTensorAddressingNV */
    spv_cap_tensor_addressing_nv = 5439,         /* TensorAddressingNV */
    spv_tensor_clamp_constant = 1,               /* TensorClampMode Constant: loads outside read the clamp value (0) */
    spv_tensor_addressing_view = 1,              /* TensorAddressingOperands TensorView */
};

#endif
