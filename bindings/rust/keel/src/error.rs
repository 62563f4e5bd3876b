//! The one error path: a failing C call's status becomes `Error`, with the message read from
//! keel_last_error() right after the call on the same thread (the core keeps one per thread).
use std::fmt;

use keel_sys as sys;

use crate::c_text::string_from_c;

/// What went wrong, one variant per `KEEL_ERR_*` code, plus the failures that start on the Rust
/// side of the boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    InvalidArgument,
    /// A JSON section is wrong; the message names its path (`model.n_heads: unknown key`).
    InvalidConfig,
    OutOfMemory,
    Unimplemented,
    Io,
    AbiMismatch,
    NotFound,
    Internal,
    NonFinite,
    /// A file or folder that was named is not there (ABI 0.19).
    MissingFile,
    /// A status code newer than these bindings.
    Unknown(i32),
    /// The step callback given to `Trainer::train` panicked; training stopped after that step.
    CallbackPanicked,
}

impl Status {
    fn from_code(code: sys::keel_status) -> Status {
        match code as u32 {
            sys::KEEL_ERR_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::KEEL_ERR_INVALID_CONFIG => Status::InvalidConfig,
            sys::KEEL_ERR_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::KEEL_ERR_UNIMPLEMENTED => Status::Unimplemented,
            sys::KEEL_ERR_IO => Status::Io,
            sys::KEEL_ERR_ABI_MISMATCH => Status::AbiMismatch,
            sys::KEEL_ERR_NOT_FOUND => Status::NotFound,
            sys::KEEL_ERR_INTERNAL => Status::Internal,
            sys::KEEL_ERR_NONFINITE => Status::NonFinite,
            sys::KEEL_ERR_MISSING_FILE => Status::MissingFile,
            _ => Status::Unknown(code),
        }
    }

    /// The C `keel_status` value; `None` for failures that never crossed the ABI.
    pub fn code(self) -> Option<i32> {
        let code = match self {
            Status::InvalidArgument => sys::KEEL_ERR_INVALID_ARGUMENT,
            Status::InvalidConfig => sys::KEEL_ERR_INVALID_CONFIG,
            Status::OutOfMemory => sys::KEEL_ERR_OUT_OF_MEMORY,
            Status::Unimplemented => sys::KEEL_ERR_UNIMPLEMENTED,
            Status::Io => sys::KEEL_ERR_IO,
            Status::AbiMismatch => sys::KEEL_ERR_ABI_MISMATCH,
            Status::NotFound => sys::KEEL_ERR_NOT_FOUND,
            Status::Internal => sys::KEEL_ERR_INTERNAL,
            Status::NonFinite => sys::KEEL_ERR_NONFINITE,
            Status::MissingFile => sys::KEEL_ERR_MISSING_FILE,
            Status::Unknown(code) => return Some(code),
            Status::CallbackPanicked => return None,
        };
        Some(code as i32)
    }
}

/// A failed Keel call: its status and the core's message, which says what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn new(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }

    pub fn status(&self) -> Status {
        self.status
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:?})", self.message, self.status)
    }
}

impl std::error::Error for Error {}

/// Turns a C call's status into a Result. Call it directly on the call's return value, with
/// no Keel call in between, so that keel_last_error() still holds this call's message.
pub(crate) fn check(code: sys::keel_status) -> Result<()> {
    if code == sys::KEEL_OK as sys::keel_status {
        return Ok(());
    }
    // SAFETY: keel_last_error returns a NUL-terminated string (or NULL) valid until this
    // thread's next Keel call; string_from_c copies it before that.
    let message = unsafe { string_from_c(sys::keel_last_error()) };
    Err(Error::new(Status::from_code(code), message))
}
