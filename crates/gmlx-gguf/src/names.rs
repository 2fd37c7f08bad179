//! Metadata keys and tensor names, spelled once (from llama.cpp's `src/llama-arch.cpp`).
//!
//! Metadata keys are [`Kv`] rows with templates such as `{arch}.attention.head_count`; pass them
//! straight to the [`crate::Metadata`] getters. Tensor names are [`Tensor`] rows with templates
//! such as `blk.{layer}.attn_q`. Add rows here as architectures need them; never spell a key or
//! tensor name as a literal elsewhere.

use std::borrow::Cow;

use crate::metadata::MetaKey;

macro_rules! table {
    ($(#[$m:meta])* $enum:ident { $($(#[$vm:meta])* $v:ident => $t:literal,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum $enum { $($(#[$vm])* $v,)* }

        impl $enum {
            /// Every row of the table.
            pub const ALL: &'static [$enum] = &[$($enum::$v,)*];

            /// The template string.
            pub fn template(self) -> &'static str {
                match self { $($enum::$v => $t,)* }
            }
        }
    };
}

table! {
    /// Metadata keys. `{arch}` is replaced by `general.architecture`.
    Kv {
        GeneralArchitecture => "general.architecture",
        GeneralType => "general.type",
        GeneralName => "general.name",
        GeneralAuthor => "general.author",
        GeneralVersion => "general.version",
        GeneralDescription => "general.description",
        GeneralLicense => "general.license",
        GeneralUrl => "general.url",
        GeneralSourceUrl => "general.source.url",
        GeneralAlignment => "general.alignment",
        GeneralFileType => "general.file_type",
        GeneralQuantizationVersion => "general.quantization_version",

        VocabSize => "{arch}.vocab_size",
        ContextLength => "{arch}.context_length",
        EmbeddingLength => "{arch}.embedding_length",
        BlockCount => "{arch}.block_count",
        LeadingDenseBlockCount => "{arch}.leading_dense_block_count",
        FeedForwardLength => "{arch}.feed_forward_length",
        ExpertFeedForwardLength => "{arch}.expert_feed_forward_length",
        ExpertSharedFeedForwardLength => "{arch}.expert_shared_feed_forward_length",
        ExpertCount => "{arch}.expert_count",
        ExpertUsedCount => "{arch}.expert_used_count",
        ExpertSharedCount => "{arch}.expert_shared_count",
        ExpertGroupCount => "{arch}.expert_group_count",
        ExpertGroupUsedCount => "{arch}.expert_group_used_count",
        ExpertWeightsScale => "{arch}.expert_weights_scale",
        ExpertWeightsNorm => "{arch}.expert_weights_norm",
        ExpertGatingFunc => "{arch}.expert_gating_func",
        NextnPredictLayers => "{arch}.nextn_predict_layers",
        UseParallelResidual => "{arch}.use_parallel_residual",
        LogitScale => "{arch}.logit_scale",
        AttnLogitSoftcapping => "{arch}.attn_logit_softcapping",
        FinalLogitSoftcapping => "{arch}.final_logit_softcapping",
        EmbeddingScale => "{arch}.embedding_scale",
        ResidualScale => "{arch}.residual_scale",
        InterleaveMoeLayerStep => "{arch}.interleave_moe_layer_step",
        FullAttentionInterval => "{arch}.full_attention_interval",

        AttentionHeadCount => "{arch}.attention.head_count",
        AttentionHeadCountKv => "{arch}.attention.head_count_kv",
        AttentionKeyLength => "{arch}.attention.key_length",
        AttentionValueLength => "{arch}.attention.value_length",
        AttentionLayerNormEpsilon => "{arch}.attention.layer_norm_epsilon",
        AttentionLayerNormRmsEpsilon => "{arch}.attention.layer_norm_rms_epsilon",
        AttentionCausal => "{arch}.attention.causal",
        AttentionQLoraRank => "{arch}.attention.q_lora_rank",
        AttentionKvLoraRank => "{arch}.attention.kv_lora_rank",
        AttentionKeyLengthMla => "{arch}.attention.key_length_mla",
        AttentionValueLengthMla => "{arch}.attention.value_length_mla",
        AttentionSlidingWindow => "{arch}.attention.sliding_window",
        AttentionSlidingWindowPattern => "{arch}.attention.sliding_window_pattern",
        AttentionScale => "{arch}.attention.scale",
        AttentionTemperatureScale => "{arch}.attention.temperature_scale",
        AttentionRecurrentLayers => "{arch}.attention.recurrent_layers",
        AttentionIndexerHeadCount => "{arch}.attention.indexer.head_count",
        AttentionIndexerKpool => "{arch}.attention.indexer.kpool",
        AttentionIndexerKpoolSelectTail => "{arch}.attention.indexer.kpool_select_tail",
        AttentionIndexerKeyLength => "{arch}.attention.indexer.key_length",
        AttentionIndexerTopK => "{arch}.attention.indexer.top_k",
        AttentionIndexerTypes => "{arch}.attention.indexer.types",
        AttentionOutputGroupCount => "{arch}.attention.output_group_count",
        AttentionOutputLoraRank => "{arch}.attention.output_lora_rank",
        AttentionCompressRopeFreqBase => "{arch}.attention.compress_rope_freq_base",
        AttentionCompressRatios => "{arch}.attention.compress_ratios",

        HyperConnectionCount => "{arch}.hyper_connection.count",
        HyperConnectionEpsilon => "{arch}.hyper_connection.epsilon",
        HyperConnectionMagnitude => "{arch}.hyper_connection.magnitude",
        HyperConnectionSinkhornIterations => "{arch}.hyper_connection.sinkhorn_iterations",
        HyperConnectionLowRank => "{arch}.hyper_connection.low_rank",
        PleLayers => "{arch}.ple.layers",
        PleNgramSize => "{arch}.ple.ngram_size",
        PleHeadsPerNgram => "{arch}.ple.heads_per_ngram",
        PleConvKernel => "{arch}.ple.conv_kernel",
        PleLayerMultipliers => "{arch}.ple.layer_multipliers",
        PleHeadOffsets => "{arch}.ple.head_offsets",
        PleHeadVocabSizes => "{arch}.ple.head_vocab_sizes",
        PleEosTokenId => "{arch}.ple.eos_token_id",
        EmbeddingLengthPerLayer => "{arch}.embedding_length_per_layer_input",
        HashLayerCount => "{arch}.hash_layer_count",
        SwigluClampExp => "{arch}.swiglu_clamp_exp",
        SwigluClampShexp => "{arch}.swiglu_clamp_shexp",
        AttnResBlockSize => "{arch}.attn_res.block_size",
        ActivationSituBeta => "{arch}.activation.situ_beta",
        ActivationSituLinearBeta => "{arch}.activation.situ_linear_beta",
        ExpertLatentLength => "{arch}.expert_latent_length",
        KdaHeadDim => "{arch}.kda.head_dim",
        KdaGateLowerBound => "{arch}.kda.gate_lower_bound",

        RopeDimensionCount => "{arch}.rope.dimension_count",
        RopeDimensionSections => "{arch}.rope.dimension_sections",
        RopeFreqBase => "{arch}.rope.freq_base",
        RopeFreqBaseSwa => "{arch}.rope.freq_base_swa",
        RopeScaleLinear => "{arch}.rope.scale_linear",
        RopeScalingType => "{arch}.rope.scaling.type",
        RopeScalingFactor => "{arch}.rope.scaling.factor",
        RopeScalingAttnFactor => "{arch}.rope.scaling.attn_factor",
        RopeScalingOrigCtxLen => "{arch}.rope.scaling.original_context_length",
        RopeScalingFinetuned => "{arch}.rope.scaling.finetuned",
        RopeScalingYarnLogMul => "{arch}.rope.scaling.yarn_log_multiplier",
        RopeScalingYarnBetaFast => "{arch}.rope.scaling.yarn_beta_fast",
        RopeScalingYarnBetaSlow => "{arch}.rope.scaling.yarn_beta_slow",

        SsmConvKernel => "{arch}.ssm.conv_kernel",
        SsmInnerSize => "{arch}.ssm.inner_size",
        SsmStateSize => "{arch}.ssm.state_size",
        SsmTimeStepRank => "{arch}.ssm.time_step_rank",
        SsmGroupCount => "{arch}.ssm.group_count",

        SplitNo => "split.no",
        SplitCount => "split.count",
        SplitTensorsCount => "split.tensors.count",

        TokenizerModel => "tokenizer.ggml.model",
        TokenizerPre => "tokenizer.ggml.pre",
        TokenizerTokens => "tokenizer.ggml.tokens",
        TokenizerTokenType => "tokenizer.ggml.token_type",
        TokenizerScores => "tokenizer.ggml.scores",
        TokenizerMerges => "tokenizer.ggml.merges",
        TokenizerBosId => "tokenizer.ggml.bos_token_id",
        TokenizerEosId => "tokenizer.ggml.eos_token_id",
        TokenizerEotId => "tokenizer.ggml.eot_token_id",
        TokenizerEomId => "tokenizer.ggml.eom_token_id",
        TokenizerUnkId => "tokenizer.ggml.unknown_token_id",
        TokenizerSepId => "tokenizer.ggml.seperator_token_id",
        TokenizerPadId => "tokenizer.ggml.padding_token_id",
        TokenizerClsId => "tokenizer.ggml.cls_token_id",
        TokenizerMaskId => "tokenizer.ggml.mask_token_id",
        TokenizerAddBos => "tokenizer.ggml.add_bos_token",
        TokenizerAddEos => "tokenizer.ggml.add_eos_token",
        TokenizerAddSpacePrefix => "tokenizer.ggml.add_space_prefix",
        TokenizerRemoveExtraWhitespaces => "tokenizer.ggml.remove_extra_whitespaces",
        TokenizerPrecompiledCharsmap => "tokenizer.ggml.precompiled_charsmap",
        TokenizerChatTemplate => "tokenizer.chat_template",
        TokenizerFimPreId => "tokenizer.ggml.fim_pre_token_id",
        TokenizerFimSufId => "tokenizer.ggml.fim_suf_token_id",
        TokenizerFimMidId => "tokenizer.ggml.fim_mid_token_id",

        AdapterType => "adapter.type",
        AdapterLoraAlpha => "adapter.lora.alpha",
    }
}

impl MetaKey for Kv {
    fn template(&self) -> Cow<'_, str> {
        Cow::Borrowed(Kv::template(*self))
    }
}

table! {
    /// Tensor base names (without the `.weight` / `.bias` suffix). `{layer}` is the block index.
    Tensor {
        TokenEmbd => "token_embd",
        TokenEmbdNorm => "token_embd_norm",
        PosEmbd => "position_embd",
        OutputNorm => "output_norm",
        Output => "output",
        RopeFreqs => "rope_freqs",
        HcHeadFn => "output_hc_fn",
        HcHeadBase => "output_hc_base",
        HcHeadScale => "output_hc_scale",
        RopeFactorsLong => "rope_factors_long",
        RopeFactorsShort => "rope_factors_short",

        AttnNorm => "blk.{layer}.attn_norm",
        AttnNorm2 => "blk.{layer}.attn_norm_2",
        AttnQ => "blk.{layer}.attn_q",
        AttnK => "blk.{layer}.attn_k",
        AttnV => "blk.{layer}.attn_v",
        AttnQkv => "blk.{layer}.attn_qkv",
        AttnOutput => "blk.{layer}.attn_output",
        AttnQNorm => "blk.{layer}.attn_q_norm",
        AttnKNorm => "blk.{layer}.attn_k_norm",
        AttnGate => "blk.{layer}.attn_gate",
        AttnPostNorm => "blk.{layer}.post_attention_norm",
        AttnSinks => "blk.{layer}.attn_sinks",
        AttnQA => "blk.{layer}.attn_q_a",
        AttnQB => "blk.{layer}.attn_q_b",
        AttnQANorm => "blk.{layer}.attn_q_a_norm",
        AttnKvAMqa => "blk.{layer}.attn_kv_a_mqa",
        AttnKv => "blk.{layer}.attn_kv",
        AttnOutputA => "blk.{layer}.attn_output_a",
        AttnOutputB => "blk.{layer}.attn_output_b",
        AttnCompressorKv => "blk.{layer}.attn_compressor_kv",
        AttnCompressorGate => "blk.{layer}.attn_compressor_gate",
        AttnCompressorApe => "blk.{layer}.attn_compressor_ape",
        AttnCompressorNorm => "blk.{layer}.attn_compressor_norm",
        IndexerCompressorKv => "blk.{layer}.indexer_compressor_kv",
        IndexerCompressorGate => "blk.{layer}.indexer_compressor_gate",
        IndexerCompressorApe => "blk.{layer}.indexer_compressor_ape",
        IndexerCompressorNorm => "blk.{layer}.indexer_compressor_norm",
        AttnKvANorm => "blk.{layer}.attn_kv_a_norm",
        AttnKvB => "blk.{layer}.attn_kv_b",
        AttnKB => "blk.{layer}.attn_k_b",
        AttnVB => "blk.{layer}.attn_v_b",
        IndexerAttnQB => "blk.{layer}.indexer.attn_q_b",
        IndexerAttnK => "blk.{layer}.indexer.attn_k",
        IndexerKNorm => "blk.{layer}.indexer.k_norm",
        IndexerProj => "blk.{layer}.indexer.proj",
        HcAttnFn => "blk.{layer}.hc_attn_fn",
        HcAttnBase => "blk.{layer}.hc_attn_base",
        HcAttnScale => "blk.{layer}.hc_attn_scale",
        HcFfnFn => "blk.{layer}.hc_ffn_fn",
        HcFfnBase => "blk.{layer}.hc_ffn_base",
        HcFfnScale => "blk.{layer}.hc_ffn_scale",

        FfnNorm => "blk.{layer}.ffn_norm",
        FfnPostNorm => "blk.{layer}.post_ffw_norm",
        FfnGate => "blk.{layer}.ffn_gate",
        FfnUp => "blk.{layer}.ffn_up",
        FfnDown => "blk.{layer}.ffn_down",
        FfnGateInp => "blk.{layer}.ffn_gate_inp",
        FfnGateExps => "blk.{layer}.ffn_gate_exps",
        FfnUpExps => "blk.{layer}.ffn_up_exps",
        FfnDownExps => "blk.{layer}.ffn_down_exps",
        FfnGateUpExps => "blk.{layer}.ffn_gate_up_exps",
        FfnGateInpShexp => "blk.{layer}.ffn_gate_inp_shexp",
        FfnGateShexp => "blk.{layer}.ffn_gate_shexp",
        FfnUpShexp => "blk.{layer}.ffn_up_shexp",
        FfnDownShexp => "blk.{layer}.ffn_down_shexp",
        FfnExpProbsB => "blk.{layer}.exp_probs_b",
        FfnGateTid2eid => "blk.{layer}.ffn_gate_tid2eid",

        SsmIn => "blk.{layer}.ssm_in",
        SsmConv1d => "blk.{layer}.ssm_conv1d",
        SsmDt => "blk.{layer}.ssm_dt",
        SsmA => "blk.{layer}.ssm_a",
        SsmD => "blk.{layer}.ssm_d",
        SsmNorm => "blk.{layer}.ssm_norm",
        SsmOut => "blk.{layer}.ssm_out",
        SsmBetaAlpha => "blk.{layer}.ssm_ba",
        SsmBeta => "blk.{layer}.ssm_beta",
        SsmAlpha => "blk.{layer}.ssm_alpha",
        SsmConv1dQ => "blk.{layer}.ssm_conv1d_q",
        SsmConv1dK => "blk.{layer}.ssm_conv1d_k",
        SsmConv1dV => "blk.{layer}.ssm_conv1d_v",
        SsmFA => "blk.{layer}.ssm_f_a",
        SsmFB => "blk.{layer}.ssm_f_b",
        SsmG => "blk.{layer}.ssm_g",
        SsmGA => "blk.{layer}.ssm_g_a",
        SsmGB => "blk.{layer}.ssm_g_b",
        AttnResScore => "blk.{layer}.attn_res_score",
        FfnResScore => "blk.{layer}.ffn_res_score",
        OutputResScore => "output_res_score",
        HcHeadNorm => "output_hc_norm",
        HcHeadDown => "output_hc_down",
        HcHeadUp => "output_hc_up",
        HcAttnNorm => "blk.{layer}.hc_attn_norm",
        HcAttnDown => "blk.{layer}.hc_attn_down",
        HcAttnUp => "blk.{layer}.hc_attn_up",
        HcAttnInject => "blk.{layer}.hc_attn_inject",
        HcFfnNorm => "blk.{layer}.hc_ffn_norm",
        HcFfnDown => "blk.{layer}.hc_ffn_down",
        HcFfnUp => "blk.{layer}.hc_ffn_up",
        HcFfnInject => "blk.{layer}.hc_ffn_inject",
        PerLayerTokenEmbd => "per_layer_token_embd",
        PleKey => "blk.{layer}.ple_key",
        PleValue => "blk.{layer}.ple_value",
        PleNormKey => "blk.{layer}.ple_norm_key",
        PleNormQuery => "blk.{layer}.ple_norm_query",
        PleNormConv => "blk.{layer}.ple_norm_conv",
        PleConv1d => "blk.{layer}.ple_conv1d",
        IndexerQProj => "blk.{layer}.indexer.q_proj",
        IndexerKProj => "blk.{layer}.indexer.k_proj",
        IndexerQNorm => "blk.{layer}.indexer.q_norm",
        FfnRoutedDown => "blk.{layer}.ffn_routed_down",
        FfnRoutedUp => "blk.{layer}.ffn_routed_up",
        FfnRoutedNorm => "blk.{layer}.ffn_routed_norm",
    }
}

impl Tensor {
    /// True when the name contains a `{layer}` placeholder.
    pub fn is_per_layer(self) -> bool {
        self.template().contains("{layer}")
    }

    /// The base name for `layer` (`blk.3.attn_q`); `layer` is ignored for global tensors.
    pub fn base(self, layer: usize) -> String {
        self.template().replace("{layer}", &layer.to_string())
    }

    /// `<base>.weight`.
    pub fn weight(self, layer: usize) -> String {
        format!("{}.weight", self.base(layer))
    }

    /// `<base>.bias`.
    pub fn bias(self, layer: usize) -> String {
        format!("{}.bias", self.base(layer))
    }

    /// Recognise a full tensor name: the row, the layer (for per-layer names) and the suffix
    /// after the base name (`weight`, `bias`, or empty).
    pub fn parse(name: &str) -> Option<(Tensor, Option<usize>, &str)> {
        let (layer, rest) = match name.strip_prefix("blk.") {
            Some(r) => {
                let (num, rest) = r.split_once('.')?;
                (Some(num.parse::<usize>().ok()?), rest)
            }
            None => (None, name),
        };
        let (base, suffix) = match rest.rsplit_once('.') {
            Some((b, s)) if s == "weight" || s == "bias" => (b, s),
            _ => (rest, ""),
        };
        Tensor::ALL.iter().copied().find_map(|t| {
            let tmpl = t.template();
            let matches = match layer {
                Some(_) => tmpl.strip_prefix("blk.{layer}.") == Some(base),
                None => !t.is_per_layer() && tmpl == base,
            };
            matches.then_some((t, layer, suffix))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_names_round_trip() {
        assert_eq!(Tensor::AttnQ.weight(3), "blk.3.attn_q.weight");
        assert_eq!(Tensor::Output.weight(0), "output.weight");
        assert_eq!(
            Tensor::parse("blk.12.ffn_down_exps.weight"),
            Some((Tensor::FfnDownExps, Some(12), "weight"))
        );
        assert_eq!(
            Tensor::parse("token_embd.weight"),
            Some((Tensor::TokenEmbd, None, "weight"))
        );
        assert_eq!(Tensor::parse("blk.x.attn_q.weight"), None);
        for t in Tensor::ALL {
            assert_eq!(Tensor::parse(&t.weight(7)).map(|p| p.0), Some(*t));
        }
    }

    #[test]
    fn templates_are_unique() {
        let mut v: Vec<_> = Kv::ALL.iter().map(|k| k.template()).collect();
        v.sort_unstable();
        v.dedup();
        assert_eq!(v.len(), Kv::ALL.len());
        let mut t: Vec<_> = Tensor::ALL.iter().map(|k| k.template()).collect();
        t.sort_unstable();
        t.dedup();
        assert_eq!(t.len(), Tensor::ALL.len());
    }
}
