//! `MappedRows` reads a tensor's rows through a map of its own bytes: the rows it decodes are
//! the whole tensor's dequantization, in every codec a fixture has, and a row past the table is
//! refused by name.
use gmlx_gguf::{GgufFile, MappedRows};

#[test]
fn mapped_rows_are_the_tensors_rows_and_out_of_range_rows_are_refused() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/llama");
    for codec in ["F16", "Q8_0", "Q4_K_M", "Q6_K"] {
        let file = GgufFile::open(format!("{dir}/llama-{codec}.gguf")).expect("open");
        let info = file.tensor("token_embd.weight").expect("embedding");
        let table = MappedRows::open(&file, info).expect("map");
        let whole = file.dequantize("token_embd.weight").expect("dequantize");
        let n = table.row_len() as usize;
        let ids = [0u32, 5, 131, table.rows() as u32 - 1];
        let rows = table.dequantize_rows(&ids).expect("rows");
        for (k, &id) in ids.iter().enumerate() {
            let want = &whole[id as usize * n..(id as usize + 1) * n];
            assert_eq!(&rows[k * n..(k + 1) * n], want, "{codec} row {id}");
        }
        let e = table
            .dequantize_rows(&[table.rows() as u32])
            .expect_err("one past the end");
        assert!(e.to_string().contains("token_embd.weight"), "{e}");
    }
}
