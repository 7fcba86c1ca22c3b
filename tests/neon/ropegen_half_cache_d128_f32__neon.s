// A scalar hot loop: one pair per iteration in s registers.
// Cut from Halide 21's aarch64 output for a ropegen kernel; bench/neon_asm.py audit must reject it.
	.text
	.globl	ropegen_half_cache_d128_f32__neon_par_for_q_rotated_s0_seq_token_tile_task
	.type	ropegen_half_cache_d128_f32__neon_par_for_q_rotated_s0_seq_token_tile_task,@function
ropegen_half_cache_d128_f32__neon_par_for_q_rotated_s0_seq_token_tile_task:
// %bb.0:
	mov	x9, x0
.LBB0_1:                                // =>This Inner Loop Header: Depth=1
	ldr	s2, [x3], #4
	adds	x22, x22, #1
	ldr	s3, [x13], #4
	fmul	s2, s0, s2
	ldr	s4, [x20], #4
	ldr	s5, [x11], #4
	fmul	s6, s3, s4
	fmul	s4, s4, s5
	fmul	s7, s5, s2
	fmul	s2, s3, s2
	fsub	s3, s6, s7
	fadd	s2, s4, s2
	str	s3, [x9], #4
	str	s2, [x29], #4
	b.lo	.LBB0_1
// %bb.2:
	ret
.Lfunc_end0:
