//! `Trainer`: owns one keel_trainer, frees it on Drop, and wraps the calls that build, step,
//! evaluate, save and load it. Parameters live in params.rs, the train loop's callback in
//! train_callback.rs.
use std::cell::OnceCell;
use std::path::Path;
use std::ptr::{self, NonNull};

use keel_sys as sys;

use crate::c_text::{c_path, c_string};
use crate::error::{check, Error, Result, Status};
use crate::metrics::StepMetrics;
use crate::params::ParamInfo;
use crate::train_callback::{train_with_callback, StepDecision};

/// A model, its optimizer, data and parallel strategy, built from a JSON config.
///
/// `Send` but not `Sync`: embed.h allows distinct trainers on distinct threads at once, and one
/// trainer from one thread at a time. Moving a trainer to another thread is that; sharing
/// `&Trainer` between threads would let two threads call it at once (the `&self` methods too:
/// reading a parameter may synchronize device memory), so it is not allowed.
///
/// ```compile_fail,E0277
/// fn shared_across_threads<T: Sync>() {}
/// shared_across_threads::<keel::Trainer>();
/// ```
pub struct Trainer {
    raw: NonNull<sys::keel_trainer>,
    /// The parameter list, fixed for the trainer's life (embed.h: names live as long as it).
    pub(crate) param_infos: OnceCell<Vec<ParamInfo>>,
}

// SAFETY: the core lets any thread use a trainer as long as one thread uses it at a time,
// which `&mut`/`&` plus `!Sync` guarantee; nothing in it is tied to the creating thread (the
// last-error message is per thread, and every method reads it on the thread that made the call).
unsafe impl Send for Trainer {}
// Not Sync: `NonNull` and `OnceCell` already make it so, and that is intended (see above).

impl Trainer {
    /// Builds a trainer from JSON text (the same schema as a config file).
    pub fn from_json(json_text: &str) -> Result<Trainer> {
        let json_text = c_string(json_text, "the JSON config")?;
        let mut raw = ptr::null_mut();
        // SAFETY: a valid C string and out-pointer; on success the core hands us ownership.
        check(unsafe { sys::keel_trainer_create_from_json(json_text.as_ptr(), &mut raw) })?;
        Ok(Trainer::own(raw))
    }

    /// Builds a trainer from a JSON config file; relative paths inside it are the core's to resolve.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Trainer> {
        let path = c_path(path.as_ref())?;
        let mut raw = ptr::null_mut();
        // SAFETY: as in from_json.
        check(unsafe { sys::keel_trainer_create_from_file(path.as_ptr(), &mut raw) })?;
        Ok(Trainer::own(raw))
    }

    fn own(raw: *mut sys::keel_trainer) -> Trainer {
        let raw = NonNull::new(raw).expect("the core reported success but returned no trainer");
        Trainer { raw, param_infos: OnceCell::new() }
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::keel_trainer {
        self.raw.as_ptr()
    }

    /// One optimizer step (all micro-batches of the accumulation).
    pub fn step(&mut self) -> Result<StepMetrics> {
        let mut metrics = StepMetrics::c_out();
        // SAFETY: a live trainer, used by this thread alone (&mut self), and a sized out struct.
        check(unsafe { sys::keel_trainer_step(self.as_ptr(), &mut metrics) })?;
        Ok(StepMetrics::from(&metrics))
    }

    /// `steps` optimizer steps, calling `on_step` after each on this thread. It returns
    /// `ControlFlow::Break(())` to stop after that step, or `()`/`ControlFlow::Continue(())`
    /// to go on. A panic in `on_step` stops training and comes back as an `Error` with
    /// `Status::CallbackPanicked`; it never unwinds through the core.
    pub fn train<F, D>(&mut self, steps: u64, on_step: F) -> Result<()>
    where
        F: FnMut(&StepMetrics) -> D,
        D: StepDecision,
    {
        let steps = i64::try_from(steps)
            .map_err(|_| Error::new(Status::InvalidArgument, format!("train: {steps} steps is more than i64::MAX")))?;
        train_with_callback(self, steps, on_step)
    }

    /// Mean validation loss over the configured number of validation batches.
    pub fn evaluate(&mut self) -> Result<f32> {
        let mut val_loss = 0.0f32;
        // SAFETY: a live trainer used by this thread alone, and a valid out-pointer.
        check(unsafe { sys::keel_trainer_evaluate(self.as_ptr(), &mut val_loss) })?;
        Ok(val_loss)
    }

    /// The metrics of the last step (zeros before the first).
    pub fn last_metrics(&self) -> Result<StepMetrics> {
        let mut metrics = StepMetrics::c_out();
        // SAFETY: a live trainer (!Sync: no other thread is in it) and a sized out struct.
        check(unsafe { sys::keel_trainer_last_metrics(self.as_ptr(), &mut metrics) })?;
        Ok(StepMetrics::from(&metrics))
    }

    /// Saves a checkpoint under `root_dir` (root_dir/step-N, then root_dir/latest), keeping
    /// the newest `keep`.
    pub fn save(&self, root_dir: impl AsRef<Path>, keep: u32) -> Result<()> {
        let root_dir = c_path(root_dir.as_ref())?;
        let keep = i32::try_from(keep)
            .map_err(|_| Error::new(Status::InvalidArgument, format!("save: keep = {keep} is more than i32::MAX")))?;
        // SAFETY: a live trainer and a valid C string.
        check(unsafe { sys::keel_trainer_save(self.as_ptr(), root_dir.as_ptr(), keep) })
    }

    /// Loads a checkpoint: a step folder, or a root whose `latest` names one.
    pub fn load(&mut self, checkpoint_path: impl AsRef<Path>) -> Result<()> {
        let checkpoint_path = c_path(checkpoint_path.as_ref())?;
        // SAFETY: a live trainer used by this thread alone, and a valid C string.
        check(unsafe { sys::keel_trainer_load(self.as_ptr(), checkpoint_path.as_ptr()) })
    }
}

impl Drop for Trainer {
    fn drop(&mut self) {
        // SAFETY: we own the trainer and nothing borrows it any more (Drop takes &mut self).
        unsafe { sys::keel_trainer_destroy(self.as_ptr()) }
    }
}
