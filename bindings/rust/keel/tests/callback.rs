//! The train callback: it can stop training early, and a panic inside it stops training and
//! comes back as an Error instead of unwinding through C++ (which would abort the process).
mod common;

use std::ops::ControlFlow;

use common::{small_config, TempDir};
use keel::{Status, StepMetrics, Trainer};

#[test]
fn callback_stops_training_early() {
    let dir = TempDir::new("stop");
    let mut trainer = Trainer::from_json(&small_config(dir.path())).unwrap();
    let mut calls = 0;
    trainer
        .train(10, |m: &StepMetrics| {
            calls += 1;
            if m.step >= 2 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
    assert_eq!(calls, 2);
    assert_eq!(trainer.last_metrics().unwrap().step, 2);
}

#[test]
fn panicking_callback_returns_an_error() {
    let dir = TempDir::new("panic");
    let mut trainer = Trainer::from_json(&small_config(dir.path())).unwrap();
    let error = trainer
        .train(5, |m: &StepMetrics| {
            if m.step == 2 {
                panic!("deliberate panic in the step callback");
            }
        })
        .unwrap_err();
    assert_eq!(error.status(), Status::CallbackPanicked, "{error}");
    assert_eq!(error.status().code(), None);
    assert!(error.message().contains("deliberate panic"), "{error}");
    assert!(error.message().contains("step 2"), "{error}");
    // Training stopped after step 2 and the trainer still works.
    assert_eq!(trainer.last_metrics().unwrap().step, 2);
    assert_eq!(trainer.step().unwrap().step, 3);
}
