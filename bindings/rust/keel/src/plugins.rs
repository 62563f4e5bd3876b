//! The plugins the core's loader found (the search folders are scanned on first call), and
//! adding a library by path ahead of them.
use std::path::{Path, PathBuf};

use keel_sys as sys;

use crate::c_text::{c_path, string_from_c};
use crate::error::{check, Result};

/// One plugin: what `keel plugins` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginInfo {
    /// "backend", "model", "optimizer", "strategy", "data".
    pub kind: String,
    /// The config's "plugin" value, unique within its kind.
    pub name: String,
    /// The plugin's own version, "1.0.0".
    pub version: String,
    /// The ABI (major, minor) it was built against.
    pub abi_version: (u32, u32),
    pub description: String,
    /// The library file; empty for a plugin registered in-process.
    pub path: PathBuf,
}

/// Every plugin the loader knows, in its order.
pub fn plugins() -> Result<Vec<PluginInfo>> {
    let mut count = 0usize;
    // SAFETY: a valid out-pointer.
    check(unsafe { sys::keel_plugin_count(&mut count) })?;
    (0..count).map(describe_plugin).collect()
}

fn describe_plugin(index: usize) -> Result<PluginInfo> {
    let mut description = sys::keel_plugin_description {
        struct_size: std::mem::size_of::<sys::keel_plugin_description>(),
        ..Default::default()
    };
    // SAFETY: a sized out struct; the core fills at most struct_size bytes.
    check(unsafe { sys::keel_plugin_describe(index, &mut description) })?;
    // SAFETY: the info, its strings and the path live as long as the process (embed.h).
    unsafe {
        let info = description.info.as_ref().copied().unwrap_or_default();
        Ok(PluginInfo {
            kind: string_from_c(description.kind_name),
            name: string_from_c(info.name),
            version: string_from_c(info.version),
            abi_version: (info.abi_major, info.abi_minor),
            description: string_from_c(info.description),
            path: PathBuf::from(string_from_c(description.path)),
        })
    }
}

/// Adds one plugin library by path, ahead of every search folder.
pub fn register_plugin_library(path: impl AsRef<Path>) -> Result<()> {
    let path = c_path(path.as_ref())?;
    // SAFETY: a valid C string, copied by the core.
    check(unsafe { sys::keel_register_plugin_library(path.as_ptr()) })
}
