//! Keel from Rust: build a [`Trainer`] from a JSON config, step or train it with a callback,
//! evaluate, save and load checkpoints, and read or write parameters. A safe layer over the
//! C embedding API (abi/keel/embed.h, through `keel-sys`): every call returns
//! `Result<T, keel::Error>` carrying the status and the core's message.
//!
//! ```no_run
//! let mut trainer = keel::Trainer::from_file("examples/quickstart.json")?;
//! trainer.train(100, |m: &keel::StepMetrics| println!("step {} loss {:.3}", m.step, m.loss))?;
//! # Ok::<(), keel::Error>(())
//! ```
//!
//! Linking: libkeel-core is found in `KEEL_LIB_DIR` (default: the repository's build/lib). An
//! application finds it at run time through LD_LIBRARY_PATH, or an rpath set by its build.rs:
//! `println!("cargo:rustc-link-arg=-Wl,-rpath,{}", std::env::var("DEP_KEEL_LIB_DIR").unwrap());`

mod c_text;
mod error;
mod metrics;
mod params;
mod plugins;
mod train_callback;
mod trainer;

pub use error::{Error, Result, Status};
pub use metrics::StepMetrics;
pub use params::ParamInfo;
pub use plugins::{plugins, register_plugin_library, PluginInfo};
pub use train_callback::StepDecision;
pub use trainer::Trainer;

/// The ABI version these bindings were generated from (abi/keel/version.h).
pub const ABI_VERSION: (u32, u32) = (keel_sys::KEEL_ABI_VERSION_MAJOR, keel_sys::KEEL_ABI_VERSION_MINOR);
