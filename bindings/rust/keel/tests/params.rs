//! Parameters: names, read/write round trip, the zero-copy view, and a save/load round trip
//! that restores every parameter exactly.
mod common;

use common::{small_config, TempDir};
use keel::{Status, Trainer};

#[test]
fn write_then_read_round_trips() {
    let dir = TempDir::new("params");
    let mut trainer = Trainer::from_json(&small_config(dir.path())).unwrap();
    let names = trainer.param_names().unwrap();
    assert!(!names.is_empty());
    let name = &names[0];
    let original = trainer.read_param(name).unwrap();
    assert_eq!(original.len(), trainer.param_infos().unwrap()[0].numel());
    let written: Vec<f32> = (0..original.len()).map(|i| (i % 97) as f32 * 0.01 - 0.5).collect();
    trainer.write_param(name, &written).unwrap();
    assert_eq!(trainer.read_param(name).unwrap(), written);
}

#[test]
fn wrong_length_and_unknown_name_fail() {
    let dir = TempDir::new("params-errors");
    let mut trainer = Trainer::from_json(&small_config(dir.path())).unwrap();
    let name = trainer.param_names().unwrap()[0].clone();
    let error = trainer.write_param(&name, &[1.0, 2.0]).unwrap_err();
    assert_eq!(error.status(), Status::InvalidArgument, "{error}");
    assert!(!error.message().is_empty());
    let error = trainer.read_param("no.such.weight").unwrap_err();
    assert_eq!(error.status(), Status::NotFound, "{error}");
    assert!(error.message().contains("no.such.weight"), "{error}");
}

#[test]
fn view_matches_read_and_writes_through() {
    let dir = TempDir::new("view");
    let mut trainer = Trainer::from_json(&small_config(dir.path())).unwrap();
    let name = trainer.param_names().unwrap()[0].clone();
    let copy = trainer.read_param(&name).unwrap();
    match trainer.param_view(&name) {
        Ok(view) => assert_eq!(view, &copy[..]),
        Err(error) if error.status() == Status::Unimplemented => return, // strategy keeps no whole copy
        Err(error) => panic!("{error}"),
    }
    trainer.param_view_mut(&name).unwrap()[0] = 42.0;
    assert_eq!(trainer.read_param(&name).unwrap()[0], 42.0);
}

fn all_params(trainer: &Trainer) -> Vec<(String, Vec<f32>)> {
    trainer
        .param_names()
        .unwrap()
        .into_iter()
        .map(|name| {
            let values = trainer.read_param(&name).unwrap();
            (name, values)
        })
        .collect()
}

#[test]
fn save_then_load_restores_every_parameter() {
    let dir = TempDir::new("checkpoint");
    let checkpoints = dir.path().join("checkpoints");
    let mut trainer = Trainer::from_json(&small_config(dir.path())).unwrap();
    trainer.train(2, |_: &keel::StepMetrics| ()).unwrap();
    trainer.save(&checkpoints, 2).unwrap();
    let saved = all_params(&trainer);

    trainer.train(2, |_: &keel::StepMetrics| ()).unwrap();
    assert_ne!(all_params(&trainer), saved, "training did not change the parameters");

    trainer.load(&checkpoints).unwrap();
    assert_eq!(all_params(&trainer), saved);
    assert_eq!(trainer.step().unwrap().step, 3, "the step count comes back with the checkpoint");
}
