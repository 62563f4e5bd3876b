//! Errors come back as keel::Error with the status and the core's message, which names the
//! JSON path of a config mistake.
mod common;

use common::{small_config_with, TempDir};
use keel::{Status, Trainer};

#[test]
fn unknown_config_key_names_its_path() {
    let dir = TempDir::new("bad-key");
    let error = Trainer::from_json(&small_config_with(dir.path(), r#", "n_heads": 4"#)).err().unwrap();
    assert_eq!(error.status(), Status::InvalidConfig, "{error}");
    assert!(error.message().contains("model.n_heads"), "the message does not name the path: {error}");
    assert_eq!(error.status().code(), Some(2));
}

#[test]
fn malformed_json_is_a_config_error() {
    let error = Trainer::from_json("{\"model\": ").err().unwrap();
    assert_eq!(error.status(), Status::InvalidConfig, "{error}");
    assert!(!error.message().is_empty());
}

#[test]
fn missing_config_file_fails_with_its_path() {
    let error = Trainer::from_file("/nonexistent/keel-config.json").err().unwrap();
    assert!(error.message().contains("/nonexistent/keel-config.json"), "{error}");
    assert_eq!(error.status(), Status::MissingFile, "{error}");
    assert_eq!(error.status().code(), Some(10));
}

#[test]
fn nul_in_text_is_refused_before_the_core() {
    let error = Trainer::from_json("{}\0").err().unwrap();
    assert_eq!(error.status(), Status::InvalidArgument);
    assert_eq!(error.status().code(), Some(1));
}

#[test]
fn loading_a_missing_checkpoint_fails() {
    let dir = TempDir::new("no-checkpoint");
    let mut trainer = Trainer::from_json(&small_config_with(dir.path(), "")).unwrap();
    let error = trainer.load(dir.path().join("nothing-here")).unwrap_err();
    assert!(error.message().contains("nothing-here"), "{error}");
    assert_eq!(error.status(), Status::MissingFile, "{error}");
}
