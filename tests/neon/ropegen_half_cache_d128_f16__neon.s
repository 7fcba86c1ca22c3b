// A vector hot loop that computes in f16 (FEAT_FP16 arithmetic) in a kernel of the neon level,
// which the dispatcher runs on CPUs without FEAT_FP16. Written for the test in the form of
// Halide 21's aarch64 output; bench/neon_asm.py audit --assembler must reject it.
	.text
	.globl	ropegen_half_cache_d128_f16__neon_par_for_q_rotated_s0_seq_token_tile_task
	.type	ropegen_half_cache_d128_f16__neon_par_for_q_rotated_s0_seq_token_tile_task,@function
ropegen_half_cache_d128_f16__neon_par_for_q_rotated_s0_seq_token_tile_task:
// %bb.0:
	mov	x9, x0
.LBB0_1:                                // =>This Inner Loop Header: Depth=1
	ldr	q2, [x3], #16
	adds	x22, x22, #1
	ldr	q3, [x13], #16
	ldr	q4, [x20], #16
	ldr	q5, [x11], #16
	fmul	v6.8h, v3.8h, v4.8h
	fmul	v4.8h, v4.8h, v5.8h
	fmls	v6.8h, v5.8h, v2.8h
	fmla	v4.8h, v3.8h, v2.8h
	str	q6, [x9], #16
	str	q4, [x29], #16
	b.lo	.LBB0_1
// %bb.2:
	ret
.Lfunc_end0:
