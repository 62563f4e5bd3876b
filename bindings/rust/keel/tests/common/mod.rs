//! What the integration tests share: a small quick-start config (examples/quickstart.json,
//! with the batch and sequence cut down so a step takes milliseconds on the CPU) whose files
//! go to a temporary folder that is removed afterwards.
#![allow(dead_code)] // each test binary uses its own part of this

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(test_name: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("keel-rust-{test_name}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&path).expect("create a temporary folder");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The quick-start run, small: micro_batch 4, seq_len 64, no TensorBoard, no samples, no
/// periodic eval or checkpoint, metrics under `dir`. `model_extra` is spliced into the model
/// section (e.g. `, "n_heads": 4` to test an error).
pub fn small_config_with(dir: &Path, model_extra: &str) -> String {
    format!(
        r#"{{
  "model":       {{"plugin": "gpt", "n_layer": 2, "n_head": 4, "d_model": 64, "vocab_size": 256, "seq_len": 64{model_extra}}},
  "optimizer":   {{"plugin": "adamw", "lr": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.1}},
  "lr_schedule": {{"warmup_steps": 1, "decay": "constant"}},
  "parallel":    {{"strategy": {{"plugin": "ddp"}}}},
  "backend":     {{"plugin": "cpu"}},
  "data":        {{"source": "text", "micro_batch": 4, "global_batch": 4, "seq_len": 64, "val_batches": 2}},
  "train":       {{"steps": 6, "seed": 1337, "grad_clip": 1.0, "log_every": 1000, "eval_every": 0,
                   "metrics_path": {metrics}, "tensorboard_dir": "none", "sample_tokens": 0}}
}}"#,
        metrics = json_string(&dir.join("metrics.jsonl")),
    )
}

pub fn small_config(dir: &Path) -> String {
    small_config_with(dir, "")
}

/// A path as a JSON string literal (temporary folders have no quotes or backslashes, but be exact).
pub fn json_string(path: &Path) -> String {
    let text = path.to_str().expect("a UTF-8 temporary path");
    let mut quoted = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if (c as u32) < 0x20 => quoted.push_str(&format!("\\u{:04x}", c as u32)),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}
