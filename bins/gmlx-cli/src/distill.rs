//! `gmlx distill`: flags, data and output checked → the teacher answers every question with
//! the document (cached on disk) → the teacher is unloaded → the student trains on the answers
//! without the documents → adapter.
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use clap::Args;
use gmlx_models::LoadOptions;
use gmlx_train::distill::{self, TeacherSettings};
use gmlx_train::OutputPlan;

use crate::model_args::{open_model, DeviceArg};
use crate::train::{config, on_interrupt, tf32_notice, write_adapter, LoraArgs, STOP};
use crate::{usage, Failure};

#[derive(Args)]
pub struct DistillArgs {
    /// The GGUF model that answers with the document in its prompt.
    #[arg(long, value_name = "GGUF")]
    teacher: PathBuf,
    /// The GGUF model that learns to answer without it (its adapter is written).
    #[arg(long, value_name = "GGUF")]
    student: PathBuf,
    /// Folder with train.jsonl (and optionally valid.jsonl): rows of
    /// {"document": ..., "questions": [...]}.
    #[arg(long, value_name = "DIR")]
    data: PathBuf,
    /// Where to write the student's adapter (llama.cpp's LoRA GGUF). An existing folder, or a
    /// path ending in `/`, gets adapter.gguf inside it.
    #[arg(long, value_name = "PATH")]
    adapter_out: PathBuf,
    /// Questions the teacher writes about each document, besides the given ones.
    #[arg(long, default_value_t = 0)]
    teacher_questions: usize,
    /// Candidates of the teacher's distribution kept per answer token.
    #[arg(long, default_value_t = 16)]
    teacher_top_k: usize,
    /// Longest teacher answer, in tokens.
    #[arg(long, default_value_t = 64)]
    max_answer_tokens: usize,
    /// The teacher's answers, cached (resumable) [default: teacher.jsonl beside the adapter].
    #[arg(long, value_name = "FILE")]
    teacher_cache: Option<PathBuf>,
    /// Where the teacher runs.
    #[arg(long, value_enum, default_value_t = DeviceArg::Auto)]
    teacher_device: DeviceArg,
    /// Where the student trains.
    #[arg(long, value_enum, default_value_t = DeviceArg::Auto)]
    device: DeviceArg,
    #[command(flatten)]
    lora: LoraArgs,
}

pub fn distill(args: DistillArgs) -> Result<(), Failure> {
    // Everything the user gave is checked before either model loads.
    let config = config(&args.lora, true)?;
    if args.teacher_top_k == 0 || args.max_answer_tokens == 0 {
        return Err(usage(anyhow::anyhow!(
            "--teacher-top-k and --max-answer-tokens must be at least 1"
        )));
    }
    let documents = distill::read_dir(&args.data).map_err(usage)?;
    if args.teacher_questions == 0 && documents.train.iter().all(|d| d.questions.is_empty()) {
        return Err(usage(anyhow::anyhow!(
            "{}: no document has questions; give some or ask for --teacher-questions N",
            documents.train_path.display()
        )));
    }
    let out = OutputPlan::resolve(&args.adapter_out).map_err(usage)?;
    let cache_path = args.teacher_cache.clone().unwrap_or_else(|| {
        out.file
            .parent()
            .map(|d| d.join("teacher.jsonl"))
            .unwrap_or_else(|| PathBuf::from("teacher.jsonl"))
    });
    if cache_path.is_dir() {
        return Err(usage(anyhow::anyhow!(
            "--teacher-cache {}: is a folder",
            cache_path.display()
        )));
    }
    let teacher_opened = open_model(&args.teacher)?;
    let student_opened = open_model(&args.student)?;
    // SAFETY: installs a handler that only stores to an atomic and resets the disposition.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }

    eprintln!(
        "gmlx: teacher {} ({})",
        args.teacher.display(),
        teacher_opened.config().arch
    );
    let teacher = teacher_opened.load(&LoadOptions {
        device: args.teacher_device.into(),
        ..LoadOptions::default()
    })?;
    if let Some(dir) = cache_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    }
    let teacher_size = std::fs::metadata(&args.teacher)
        .map(|m| m.len())
        .unwrap_or(0);
    let settings = TeacherSettings {
        identity: format!(
            "{} {teacher_size}",
            args.teacher
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        ),
        top_k: args.teacher_top_k,
        max_answer_tokens: args.max_answer_tokens,
        extra_questions: args.teacher_questions,
        seed: config.seed,
    };
    let mut say = |line: &str| eprintln!("gmlx: {line}");
    let (train_answers, t_stats) = distill::answer_all(
        &teacher.model,
        &teacher.tokenizer,
        &documents.train,
        &settings,
        &cache_path,
        &mut say,
    )?;
    let (valid_answers, _) = distill::answer_all(
        &teacher.model,
        &teacher.tokenizer,
        &documents.valid,
        &settings,
        &cache_path,
        &mut say,
    )?;
    eprintln!(
        "gmlx: teacher: {} answers ({} from {}), {} tokens at {:.1} tok/s",
        t_stats.answers,
        t_stats.cached,
        cache_path.display(),
        t_stats.tokens,
        t_stats.tokens_per_sec()
    );
    if STOP.load(Ordering::Relaxed) {
        return Err(Failure {
            code: 130,
            error: anyhow::anyhow!("interrupted after the teacher's pass; its answers are cached"),
        });
    }
    let teacher_tokenizer = teacher.tokenizer.clone();
    drop(teacher);

    eprintln!(
        "gmlx: student {} ({})",
        args.student.display(),
        student_opened.config().arch
    );
    let mut student = student_opened.load(&LoadOptions {
        device: args.device.into(),
        ..LoadOptions::default()
    })?;
    if let Some(notice) = tf32_notice(gmlx_mlx::init(), student.config()) {
        eprintln!("{notice}");
    }
    let max_len = config.max_seq_length;
    let (train_set, align) = distill::examples(
        &student.tokenizer,
        &teacher_tokenizer,
        &train_answers,
        max_len,
    )?;
    let (valid_set, _) = distill::examples(
        &student.tokenizer,
        &teacher_tokenizer,
        &valid_answers,
        max_len,
    )?;
    if train_set.is_empty() {
        return Err(
            anyhow::anyhow!("{}: no answer to train on", documents.train_path.display()).into(),
        );
    }
    eprintln!(
        "gmlx: {} rows; {} of {} answer positions ({:.1}%) learn the teacher's distribution{}",
        train_set.len(),
        align.aligned,
        align.positions,
        100.0 * align.fraction(),
        if align.same_vocabulary {
            " (same vocabulary)"
        } else {
            " (aligned by bytes across the two tokenizers)"
        }
    );
    let trained = gmlx_train::train_examples(
        &mut student.model,
        &train_set,
        &valid_set,
        &config,
        &mut |p| eprintln!("gmlx: {p}"),
        &STOP,
    );
    write_adapter(trained, &out, &config)
}
