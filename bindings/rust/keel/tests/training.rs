//! Training through the safe API: the loss falls, step() and train() agree on the step count,
//! evaluate() gives a finite loss, and a config file loads like JSON text.
mod common;

use common::{small_config, TempDir};
use keel::Trainer;

#[test]
fn loss_falls_over_six_steps() {
    let dir = TempDir::new("loss");
    let mut trainer = Trainer::from_json(&small_config(dir.path())).unwrap();
    let mut losses = Vec::new();
    trainer.train(6, |m: &keel::StepMetrics| losses.push(m.loss)).unwrap();
    assert_eq!(losses.len(), 6);
    assert!(losses.iter().all(|l| l.is_finite()), "losses {losses:?}");
    assert!(losses[5] < losses[0], "the loss did not fall over 6 steps: {losses:?}");
    assert_eq!(trainer.last_metrics().unwrap().step, 6);
}

#[test]
fn step_counts_and_evaluates() {
    let dir = TempDir::new("step");
    let mut trainer = Trainer::from_json(&small_config(dir.path())).unwrap();
    assert_eq!(trainer.last_metrics().unwrap().step, 0);
    let first = trainer.step().unwrap();
    let second = trainer.step().unwrap();
    assert_eq!((first.step, second.step), (1, 2));
    assert!(second.tokens_per_s > 0.0 && second.step_ms > 0.0, "{second:?}");
    assert_eq!(trainer.last_metrics().unwrap(), second);
    let val_loss = trainer.evaluate().unwrap();
    assert!(val_loss.is_finite() && val_loss > 0.0, "val loss {val_loss}");
}

#[test]
fn from_file_reads_a_config_file() {
    let dir = TempDir::new("from-file");
    let config_path = dir.path().join("run.json");
    std::fs::write(&config_path, small_config(dir.path())).unwrap();
    let mut trainer = Trainer::from_file(&config_path).unwrap();
    assert_eq!(trainer.step().unwrap().step, 1);
}

#[test]
fn trainers_move_to_other_threads() {
    let dir = TempDir::new("threads");
    let config = small_config(dir.path());
    let trainers: Vec<Trainer> = (0..2).map(|_| Trainer::from_json(&config).unwrap()).collect();
    let handles: Vec<_> =
        trainers.into_iter().map(|mut trainer| std::thread::spawn(move || trainer.step().unwrap().step)).collect();
    for handle in handles {
        assert_eq!(handle.join().unwrap(), 1);
    }
}
