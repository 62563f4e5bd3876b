//! Strings across the boundary: Rust text and paths to NUL-terminated C strings (refused with
//! an InvalidArgument error when they hold a NUL), and C strings back to owned Rust strings.
use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::error::{Error, Result, Status};

pub(crate) fn c_string(text: &str, what: &str) -> Result<CString> {
    CString::new(text).map_err(|_| Error::new(Status::InvalidArgument, format!("{what} holds a NUL byte")))
}

pub(crate) fn c_path(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::new(Status::InvalidArgument, format!("path {} holds a NUL byte", path.display())))
}

/// Copies a C string; NULL reads as "". Invalid UTF-8 is replaced, not refused.
///
/// # Safety
/// `text` is NULL or points at a NUL-terminated string that stays valid during the call.
pub(crate) unsafe fn string_from_c(text: *const c_char) -> String {
    if text.is_null() {
        return String::new();
    }
    CStr::from_ptr(text).to_string_lossy().into_owned()
}
