//! Every ggml tensor type of llama.cpp (`ggml/include/ggml.h`, `enum ggml_type`) and its block layout.

use std::fmt;

/// Elements per super-block of the K-quants and IQ codecs.
pub const QK_K: usize = 256;

/// A ggml tensor type: its id in the file, and the shape of one block.
///
/// Ids 4, 5 (Q4_2, Q4_3) and 31..=33, 36..=38 (the repacked Q4_0_x_y / IQ4_NL_x_y layouts)
/// were removed from GGUF files upstream and are unknown here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(non_camel_case_types)]
#[non_exhaustive]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
    NVFP4,
    Q1_0,
    Q2_0,
}

/// One row per type: (type, id, name, elements per block, bytes per block).
/// Sizes follow the `static_assert`s on the block structs in `ggml/src/ggml-common.h`.
const TABLE: &[(GgmlType, u32, &str, usize, usize)] = &[
    (GgmlType::F32, 0, "F32", 1, 4),
    (GgmlType::F16, 1, "F16", 1, 2),
    (GgmlType::Q4_0, 2, "Q4_0", 32, 2 + 16),
    (GgmlType::Q4_1, 3, "Q4_1", 32, 2 + 2 + 16),
    (GgmlType::Q5_0, 6, "Q5_0", 32, 2 + 4 + 16),
    (GgmlType::Q5_1, 7, "Q5_1", 32, 2 + 2 + 4 + 16),
    (GgmlType::Q8_0, 8, "Q8_0", 32, 2 + 32),
    (GgmlType::Q8_1, 9, "Q8_1", 32, 2 + 2 + 32),
    (
        GgmlType::Q2_K,
        10,
        "Q2_K",
        QK_K,
        2 + 2 + QK_K / 16 + QK_K / 4,
    ),
    (
        GgmlType::Q3_K,
        11,
        "Q3_K",
        QK_K,
        2 + QK_K / 4 + QK_K / 8 + 12,
    ),
    (GgmlType::Q4_K, 12, "Q4_K", QK_K, 2 + 2 + 12 + QK_K / 2),
    (
        GgmlType::Q5_K,
        13,
        "Q5_K",
        QK_K,
        2 + 2 + 12 + QK_K / 2 + QK_K / 8,
    ),
    (
        GgmlType::Q6_K,
        14,
        "Q6_K",
        QK_K,
        2 + QK_K / 16 + 3 * QK_K / 4,
    ),
    (GgmlType::Q8_K, 15, "Q8_K", QK_K, 4 + QK_K + QK_K / 16 * 2),
    (GgmlType::IQ2_XXS, 16, "IQ2_XXS", QK_K, 2 + QK_K / 8 * 2),
    (
        GgmlType::IQ2_XS,
        17,
        "IQ2_XS",
        QK_K,
        2 + QK_K / 8 * 2 + QK_K / 32,
    ),
    (GgmlType::IQ3_XXS, 18, "IQ3_XXS", QK_K, 2 + 3 * (QK_K / 8)),
    (GgmlType::IQ1_S, 19, "IQ1_S", QK_K, 2 + QK_K / 8 + QK_K / 16),
    (GgmlType::IQ4_NL, 20, "IQ4_NL", 32, 2 + 16),
    (
        GgmlType::IQ3_S,
        21,
        "IQ3_S",
        QK_K,
        2 + 13 * (QK_K / 32) + QK_K / 64,
    ),
    (GgmlType::IQ2_S, 22, "IQ2_S", QK_K, 2 + QK_K / 4 + QK_K / 16),
    (
        GgmlType::IQ4_XS,
        23,
        "IQ4_XS",
        QK_K,
        2 + 2 + QK_K / 64 + QK_K / 2,
    ),
    (GgmlType::I8, 24, "I8", 1, 1),
    (GgmlType::I16, 25, "I16", 1, 2),
    (GgmlType::I32, 26, "I32", 1, 4),
    (GgmlType::I64, 27, "I64", 1, 8),
    (GgmlType::F64, 28, "F64", 1, 8),
    (
        GgmlType::IQ1_M,
        29,
        "IQ1_M",
        QK_K,
        QK_K / 8 + QK_K / 16 + QK_K / 32,
    ),
    (GgmlType::BF16, 30, "BF16", 1, 2),
    (
        GgmlType::TQ1_0,
        34,
        "TQ1_0",
        QK_K,
        2 + QK_K / 64 + (QK_K - 4 * QK_K / 64) / 5,
    ),
    (GgmlType::TQ2_0, 35, "TQ2_0", QK_K, 2 + QK_K / 4),
    (GgmlType::MXFP4, 39, "MXFP4", 32, 1 + 16),
    (GgmlType::NVFP4, 40, "NVFP4", 64, 4 + 32),
    (GgmlType::Q1_0, 41, "Q1_0", 128, 2 + 128 / 8),
    (GgmlType::Q2_0, 42, "Q2_0", 64, 2 + 64 / 4),
];

impl GgmlType {
    /// Every type, in id order.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        TABLE.iter().map(|r| r.0)
    }

    fn row(self) -> &'static (GgmlType, u32, &'static str, usize, usize) {
        // The table has one row per variant (checked by a unit test); the fallback row is never used.
        TABLE.iter().find(|r| r.0 == self).unwrap_or(&TABLE[0])
    }

    /// The type with this id in a GGUF tensor table, if it is a known one.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        TABLE.iter().find(|r| r.1 == id).map(|r| r.0)
    }

    /// The type's id in a GGUF tensor table.
    pub fn id(self) -> u32 {
        self.row().1
    }

    /// The name llama.cpp prints (`Q4_K`, `IQ2_XXS`, ...).
    pub fn name(self) -> &'static str {
        self.row().2
    }

    /// Parse a name as printed by [`GgmlType::name`] (case-insensitive).
    pub fn from_name(name: &str) -> Option<GgmlType> {
        TABLE
            .iter()
            .find(|r| r.2.eq_ignore_ascii_case(name))
            .map(|r| r.0)
    }

    /// Elements per block (1 for plain scalar types).
    pub fn block_size(self) -> usize {
        self.row().3
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        self.row().4
    }

    /// True for block-quantized types (block size above one).
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Bytes for `n_elements` elements, or `None` when `n_elements` is not a whole number of
    /// blocks or the byte count overflows.
    pub fn bytes_for(self, n_elements: u64) -> Option<u64> {
        let bs = self.block_size() as u64;
        if !n_elements.is_multiple_of(bs) {
            return None;
        }
        (n_elements / bs).checked_mul(self.type_size() as u64)
    }

    /// Whether [`crate::dequantize`] can decode this type to f32.
    pub fn can_dequantize(self) -> bool {
        crate::codec::kernel(self).is_some()
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        let mut ids: Vec<u32> = TABLE.iter().map(|r| r.1).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), TABLE.len());
        for (i, row) in TABLE.iter().enumerate() {
            assert_eq!(TABLE.iter().position(|r| r.0 == row.0), Some(i));
            assert_eq!(GgmlType::from_id(row.1), Some(row.0));
            assert_eq!(GgmlType::from_name(row.2), Some(row.0));
        }
        assert_eq!(GgmlType::Q8_K.type_size(), 292);
        assert_eq!(GgmlType::IQ3_S.type_size(), 110);
        assert_eq!(GgmlType::TQ1_0.type_size(), 54);
        assert_eq!(GgmlType::from_id(4), None);
    }
}
