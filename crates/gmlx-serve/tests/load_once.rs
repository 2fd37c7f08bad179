//! Serving a model opens its GGUF once: the engine's load gives the plan, the weights and the
//! tokenizer that the request handlers use.
use std::path::PathBuf;

#[test]
fn each_served_model_opens_its_file_once() {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let mut config = gmlx_serve::ServeConfig::single(fixtures.join("qwen3/qwen3-Q8_0.gguf"));
    let mut second = config.models[0].clone();
    second.id = "second".to_owned();
    second.path = fixtures.join("llama/llama-Q8_0.gguf");
    config.models.push(second);

    let before = gmlx_gguf::opened_in_this_process();
    let models = gmlx_serve::load_models(&config).expect("the models load");
    assert_eq!(gmlx_gguf::opened_in_this_process() - before, 2);

    // the handlers tokenize with the tokenizer of that load
    let ids = models["second"]
        .tokenizer
        .encode("hello world", false, false)
        .expect("encode");
    assert!(!ids.is_empty());
    for model in models.values() {
        model.engine.clone().shutdown();
    }
}
