//! `QuantWeight` from real GGUF bytes: the affine repack, as MLX itself dequantizes and
//! multiplies it, equals gmlx-gguf's reference dequantization (which is bit-identical to
//! gguf-py's), for every codec that maps; other codecs are dense and equal too.
use gmlx_gguf::{GgmlType, GgufFile, GgufWriter};
use gmlx_mlx::{Array, Dtype, QuantWeight, Storage};

/// Deterministic bytes (xorshift).
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        })
        .collect()
}

/// Random blocks of `ty` whose leading f16 scale fields (d, and m/dmin where the codec has
/// one) are finite and small.
fn blocks(ty: GgmlType, n_blocks: usize, seed: u64) -> Vec<u8> {
    let size = ty.type_size();
    let mut bytes = noise(n_blocks * size, seed);
    let scale_fields = match ty {
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => 2,
        _ => 1,
    };
    if ty == GgmlType::MXFP4 {
        // one E8M0 exponent byte: keep it in a normal range
        for (b, block) in bytes.chunks_mut(size).enumerate() {
            block[0] = 120 + (b % 10) as u8;
        }
        return bytes;
    }
    // where the f16 super-block scale sits: first, except for Q3_K and Q6_K (last)
    let at = match ty {
        GgmlType::Q3_K | GgmlType::Q6_K => size - 2,
        _ => 0,
    };
    for (b, block) in bytes.chunks_mut(size).enumerate() {
        for f in 0..scale_fields {
            let v = half::f16::from_f32(0.01 + 0.003 * ((b * 7 + f * 3) % 11) as f32);
            block[at + 2 * f..at + 2 * f + 2].copy_from_slice(&v.to_le_bytes());
        }
    }
    bytes
}

fn host(a: &Array) -> Vec<f32> {
    let a = a.as_dtype(Dtype::Float32).expect("cast");
    a.eval().expect("eval");
    a.as_slice::<f32>().to_vec()
}

#[test]
fn every_codec_loads_exactly_and_multiplies() {
    gmlx_mlx::device::use_device(gmlx_mlx::device::DeviceChoice::Auto).expect("device");
    let (rows, cols) = (8u64, 512u64);
    let codecs = [
        (GgmlType::Q4_0, true),
        (GgmlType::Q4_1, true),
        (GgmlType::Q5_0, true),
        (GgmlType::Q5_1, true),
        (GgmlType::Q8_0, true),
        (GgmlType::Q4_K, true),
        (GgmlType::Q5_K, true),
        (GgmlType::MXFP4, true),
        (GgmlType::Q6_K, false),
        (GgmlType::Q3_K, false),
    ];
    // the legacy quants' scales and biases are float16 values in the file: a float32 weight
    // on the CPU keeps them as float16 (the K-quants' are products of two fields: float32)
    let compact = |ty: GgmlType| {
        matches!(
            ty,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0
        )
    };
    let on_cpu = gmlx_mlx::device::current() == Some(gmlx_mlx::device::DeviceKind::Cpu);
    let dir = std::env::temp_dir().join(format!("gmlx-quant-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let path = dir.join("codecs.gguf");
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "llama").expect("kv");
    for (i, (ty, _)) in codecs.iter().enumerate() {
        let n_blocks = (rows * cols) as usize / ty.block_size();
        w.add_tensor(
            &format!("t{i}"),
            *ty,
            &[cols, rows],
            blocks(*ty, n_blocks, i as u64 + 1),
        )
        .expect("tensor");
    }
    w.write_to_path(&path).expect("write");
    let file = GgufFile::open(&path).expect("open");

    // 3 rows take MLX's quantized matmul; 8 rows, on the CPU, dequantize-then-BLAS (on a GPU
    // from 40 rows, dequantize then the dense GEMM); under a host-products guard, on the CPU,
    // 3 and 8 rows the host kernel, 130 the host dequantization
    let x: Vec<f32> = (0..130 * cols)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect();
    for (i, (ty, affine)) in codecs.iter().enumerate() {
        let info = file.tensor(&format!("t{i}")).expect("tensor");
        let weight = QuantWeight::from_gguf(&file, info, Dtype::Float32).expect("load");
        assert_eq!(
            matches!(weight.storage(), Storage::Affine { .. } | Storage::Mxfp4),
            *affine,
            "{ty:?}"
        );
        // Q6_K keeps its blocks only on CUDA (tests/cuda_q6k.rs)
        if on_cpu && *ty == GgmlType::Q6_K {
            assert_eq!(weight.storage(), Storage::Dense, "Q6_K on the CPU");
        }
        if let (true, Storage::Affine { bits, group_size }) = (on_cpu, weight.storage()) {
            let side = if compact(*ty) { 2 } else { 4 };
            let groups = rows as usize * cols as usize / group_size as usize;
            assert_eq!(
                weight.nbytes(),
                rows as usize * cols as usize * bits as usize / 8 + 2 * groups * side,
                "{ty:?}: codes and {side}-byte scales and biases"
            );
        }
        let reference = file.dequantize(&info.name).expect("reference");
        let ours = host(&weight.dequantized().expect("dequantize"));
        assert_eq!(ours.len(), reference.len());
        let mismatches = ours.iter().zip(&reference).filter(|(a, b)| a != b).count();
        assert_eq!(
            mismatches, 0,
            "{ty:?}: {mismatches} values differ from the reference"
        );

        // matmul against a host product with the reference weights
        for (host_products, m) in [
            (false, 3usize),
            (false, 8),
            (false, 40),
            (true, 3),
            (true, 8),
            (true, 130),
        ] {
            let _guard = host_products.then(gmlx_mlx::quant::host_products);
            let xa = Array::from_slice(&x[..m * cols as usize], &[m as i32, cols as i32]);
            let y = host(&weight.matmul(&xa).expect("matmul"));
            for r in 0..m {
                for o in 0..rows as usize {
                    let dot: f64 = (0..cols as usize)
                        .map(|c| {
                            f64::from(x[r * cols as usize + c])
                                * f64::from(reference[o * cols as usize + c])
                        })
                        .sum();
                    let got = y[r * rows as usize + o];
                    assert!(
                        (f64::from(got) - dot).abs() < 1e-3 * (1.0 + dot.abs()),
                        "{ty:?} {m} rows, host products {host_products} [{r},{o}]: {got} vs {dot}"
                    );
                }
            }
        }

        // the embedding lookup gathers then dequantizes only those rows
        let ids = Array::from_slice(&[5u32, 0, 5], &[3]);
        let gathered = host(&weight.rows(&ids).expect("rows"));
        for (k, &id) in [5usize, 0, 5].iter().enumerate() {
            let c = cols as usize;
            assert_eq!(
                &gathered[k * c..(k + 1) * c],
                &reference[id * c..(id + 1) * c],
                "{ty:?}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn expert_stacks_multiply_the_selected_expert_per_row() {
    gmlx_mlx::device::use_device(gmlx_mlx::device::DeviceChoice::Auto).expect("device");
    let (experts, rows, cols) = (4u64, 8u64, 256u64);
    let dir = std::env::temp_dir().join(format!("gmlx-experts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let path = dir.join("experts.gguf");
    let codecs = [GgmlType::Q4_0, GgmlType::MXFP4, GgmlType::Q6_K];
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "test").expect("kv");
    for (i, ty) in codecs.iter().enumerate() {
        let n_blocks = (experts * rows * cols) as usize / ty.block_size();
        w.add_tensor(
            &format!("e{i}"),
            *ty,
            &[cols, rows, experts],
            blocks(*ty, n_blocks, 40 + i as u64),
        )
        .expect("tensor");
    }
    w.write_to_path(&path).expect("write");
    let file = GgufFile::open(&path).expect("open");
    let picks = [3u32, 0, 2, 3, 1];
    let (r, c) = (rows as usize, cols as usize);
    let x: Vec<f32> = (0..picks.len() * c)
        .map(|i| ((i * 13 % 29) as f32 - 14.0) / 14.0)
        .collect();
    let xa = Array::from_slice(&x, &[picks.len() as i32, 1, cols as i32]);
    let ids = Array::from_slice(&picks, &[picks.len() as i32]);
    for (i, ty) in codecs.iter().enumerate() {
        let info = file.tensor(&format!("e{i}")).expect("tensor");
        let weight = QuantWeight::from_gguf(&file, info, Dtype::Float32).expect("load");
        assert_eq!(weight.experts(), Some(experts as i32));
        let reference = file.dequantize(&info.name).expect("reference");
        let y = host(&weight.gather_matmul(&xa, &ids).expect("gather"));
        assert_eq!(y.len(), picks.len() * r, "{ty:?}");
        for (t, &e) in picks.iter().enumerate() {
            for o in 0..r {
                let wrow = &reference[(e as usize * r + o) * c..(e as usize * r + o + 1) * c];
                let dot: f64 = (0..c)
                    .map(|k| f64::from(x[t * c + k]) * f64::from(wrow[k]))
                    .sum();
                let got = f64::from(y[t * r + o]);
                assert!(
                    (got - dot).abs() < 1e-3 * (1.0 + dot.abs()),
                    "{ty:?} row {t} out {o}: {got} vs {dot}"
                );
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Experts decoded one at a time on the host and bound into the slots of an empty stack (the
/// streaming arena) give bitwise the products of the resident stack, for an affine codec,
/// MXFP4 and a dense one; a rebound slot gives its new expert's.
#[test]
fn experts_bound_into_slots_multiply_as_the_resident_stack() {
    use gmlx_mlx::quant::HostMatrix;
    gmlx_mlx::device::use_device(gmlx_mlx::device::DeviceChoice::Auto).expect("device");
    let (experts, rows, cols) = (4u64, 8u64, 256u64);
    let x: Vec<f32> = (0..3 * cols as usize)
        .map(|i| ((i * 11 % 23) as f32 - 11.0) / 11.0)
        .collect();
    let xa = Array::from_slice(&x, &[3, 1, cols as i32]);
    for (i, ty) in [GgmlType::Q4_K, GgmlType::MXFP4, GgmlType::Q6_K]
        .into_iter()
        .enumerate()
    {
        let n_blocks = (experts * rows * cols) as usize / ty.block_size();
        let bytes = blocks(ty, n_blocks, 70 + i as u64);
        let dims = [cols, rows, experts];
        let resident = QuantWeight::from_host(
            "e",
            ty,
            &HostMatrix::decode(ty, &bytes, &dims).expect("decode"),
            experts as i32,
            (rows as i32, cols as i32),
            Dtype::Float32,
        )
        .expect("resident");
        let per_expert = bytes.len() / experts as usize;
        let expert = |e: usize| {
            HostMatrix::decode(
                ty,
                &bytes[e * per_expert..(e + 1) * per_expert],
                &[cols, rows],
            )
            .expect("decode one")
        };
        let mut slots =
            QuantWeight::empty_stack("e", ty, 2, (rows as i32, cols as i32), Dtype::Float32)
                .expect("slots");
        assert_eq!(slots.storage(), resident.storage(), "{ty:?}");
        slots.bind_expert(0, &expert(3)).expect("bind");
        slots.bind_expert(1, &expert(1)).expect("bind");
        let want = host(
            &resident
                .gather_matmul(&xa, &Array::from_slice(&[3u32, 1, 3], &[3]))
                .expect("gather"),
        );
        let got = host(
            &slots
                .gather_matmul(&xa, &Array::from_slice(&[0u32, 1, 0], &[3]))
                .expect("gather"),
        );
        assert_eq!(got, want, "{ty:?}");
        slots.bind_expert(0, &expert(2)).expect("rebind");
        let want = host(
            &resident
                .gather_matmul(&xa, &Array::from_slice(&[2u32, 1, 2], &[3]))
                .expect("gather"),
        );
        let got = host(
            &slots
                .gather_matmul(&xa, &Array::from_slice(&[0u32, 1, 0], &[3]))
                .expect("gather"),
        );
        assert_eq!(got, want, "{ty:?} after a rebind");
        let other = HostMatrix::decode(
            GgmlType::Q8_0,
            &blocks(GgmlType::Q8_0, 64, 1),
            &[cols, rows],
        )
        .expect("decode");
        if slots.storage() != other.storage() {
            assert!(
                slots.bind_expert(1, &other).is_err(),
                "{ty:?}: another form is refused"
            );
        }
    }
}

/// Under `training_products`, gradients flow through a quantized weight's product to the
/// activations at every row count (MLX's quantized matmul for few rows, the checkpointed
/// dequantize-then-BLAS route from 4 rows on the CPU) as through the dense dequantized weight.
#[test]
fn training_products_pass_gradients_to_the_activations() {
    use gmlx_mlx::mlx_rs::error::Exception;
    use gmlx_mlx::mlx_rs::transforms::value_and_grad;

    gmlx_mlx::device::use_device(gmlx_mlx::device::DeviceChoice::Auto).expect("device");
    let (rows, cols) = (48u64, 256u64);
    let dir = std::env::temp_dir().join(format!("gmlx-quant-grad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let path = dir.join("q4k.gguf");
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "llama").expect("kv");
    let n_blocks = (rows * cols) as usize / GgmlType::Q4_K.block_size();
    w.add_tensor(
        "w",
        GgmlType::Q4_K,
        &[cols, rows],
        blocks(GgmlType::Q4_K, n_blocks, 5),
    )
    .expect("tensor");
    w.write_to_path(&path).expect("write");
    let file = GgufFile::open(&path).expect("open");
    let weight =
        QuantWeight::from_gguf(&file, file.tensor("w").expect("w"), Dtype::Float32).expect("load");
    let dense = weight.dequantized().expect("dequantize");

    for n in [2, 16] {
        let x: Vec<f32> = (0..n * cols as usize)
            .map(|i| ((i * 29 % 97) as f32 - 48.0) / 48.0)
            .collect();
        let x = Array::from_slice(&x, &[n as i32, cols as i32]);
        let loss = |y: Array| -> Result<Vec<Array>, Exception> { Ok(vec![y.sin()?.sum(None)?]) };
        let mut through_weight = value_and_grad(|xs: &[Array]| {
            loss(weight.matmul(&xs[0]).map_err(|e| e.into_exception())?)
        });
        let mut through_dense = value_and_grad(|xs: &[Array]| loss(xs[0].matmul(dense.t())?));
        let (_, got) = {
            let _training = gmlx_mlx::quant::training_products();
            through_weight(std::slice::from_ref(&x)).expect("gradient through the weight")
        };
        let (_, want) = through_dense(std::slice::from_ref(&x)).expect("dense gradient");
        let (got, want) = (host(&got[0]), host(&want[0]));
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst <= 1e-4 * scale, "{n} rows: {worst} (scale {scale})");
    }
}
