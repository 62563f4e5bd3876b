//! Plugin discovery through the safe API: the built-in plugins of the quick start are found
//! beside libkeel-core, and registering a library that does not exist fails with its path.
use keel::{plugins, register_plugin_library};

#[test]
fn lists_the_quick_start_plugins() {
    let found = plugins().unwrap();
    for (kind, name) in [("backend", "cpu"), ("model", "gpt"), ("optimizer", "adamw"), ("strategy", "ddp")] {
        let plugin = found
            .iter()
            .find(|p| p.kind == kind && p.name == name)
            .unwrap_or_else(|| panic!("no {kind} plugin \"{name}\" in {found:#?}"));
        assert_eq!(plugin.abi_version.0, keel::ABI_VERSION.0);
        assert!(!plugin.version.is_empty());
    }
}

#[test]
fn registering_a_missing_library_fails() {
    let error = register_plugin_library("/nonexistent/libkeel-nothing.so").unwrap_err();
    assert!(error.message().contains("/nonexistent/libkeel-nothing.so"), "{error}");
}
