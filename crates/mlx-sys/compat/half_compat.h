/* Force-included (-include) into the mlx-c build (C++) and into bindgen (C) by build.rs.
 *
 * mlx-c's mlx/c/half.h defines float16_t / bfloat16_t, and the HAS_FLOAT16 / HAS_BFLOAT16
 * switches that gate mlx_array_{item,data}_{float16,bfloat16}, only on ARM; mlx-rs 0.33 uses
 * them on every target. Those functions only move 16-bit patterns through pointers, so any
 * 2-byte type is ABI-correct. For bindgen, __fp16 and unsigned short give exactly the Rust
 * items aarch64 gets (__BindgenFloat16(u16) and u16); the C++ side uses unsigned short. */
#ifndef MLX_SYS_HALF_COMPAT_H
#define MLX_SYS_HALF_COMPAT_H

#if !(defined(__ARM_FEATURE_FP16_SCALAR_ARITHMETIC) || defined(__aarch64__))
#define HAS_FLOAT16
#if defined(__clang__) && !defined(__cplusplus)
typedef __fp16 float16_t;
#else
typedef unsigned short float16_t;
#endif
#endif

#if !(defined(__ARM_FEATURE_BF16) || defined(__aarch64__))
#define HAS_BFLOAT16
typedef unsigned short bfloat16_t;
#endif

#endif
