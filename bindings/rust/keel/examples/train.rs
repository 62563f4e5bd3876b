//! Trains a config from Rust and prints each step, then the validation loss: the embedding API
//! end to end in a page.
//!   cargo run --example train -- [CONFIG.json] [STEPS]
//! (default: the repository's examples/quickstart.json, 20 steps; its files go under ./runs/).
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;

use keel::{StepMetrics, Trainer};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let config = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../examples/quickstart.json"));
    let steps: u64 = match args.next().map(|text| text.parse()) {
        None => 20,
        Some(Ok(steps)) => steps,
        Some(Err(error)) => {
            eprintln!("STEPS must be a whole number: {error}");
            return ExitCode::from(2);
        }
    };
    match run(&config, steps) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run(config: &std::path::Path, steps: u64) -> keel::Result<()> {
    let mut trainer = Trainer::from_file(config)?;
    println!("{}: {} parameter tensors", config.display(), trainer.param_names()?.len());
    trainer.train(steps, |m: &StepMetrics| {
        println!("step {:4}  loss {:.4}  lr {:.2e}  {:.0} tokens/s", m.step, m.loss, m.lr, m.tokens_per_s);
        if m.loss.is_finite() {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(())
        }
    })?;
    println!("validation loss {:.4}", trainer.evaluate()?);
    Ok(())
}
