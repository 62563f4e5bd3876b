//! The bridge from a Rust closure to keel_step_callback. A panic must not unwind into C++ (it
//! would abort the process), so the trampoline catches it, tells the core to stop, and
//! `train` turns it into an `Error` once the core has returned.
use std::any::Any;
use std::ops::ControlFlow;
use std::os::raw::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use keel_sys as sys;

use crate::error::{check, Error, Result, Status};
use crate::metrics::StepMetrics;
use crate::trainer::Trainer;

/// What a step callback returns: whether training stops after this step.
pub trait StepDecision {
    fn stops_training(self) -> bool;
}

/// Never stops.
impl StepDecision for () {
    fn stops_training(self) -> bool {
        false
    }
}

/// `Break(())` stops after this step.
impl StepDecision for ControlFlow<()> {
    fn stops_training(self) -> bool {
        self.is_break()
    }
}

struct CallbackState<F> {
    on_step: F,
    panic: Option<(i64, Box<dyn Any + Send>)>,
}

unsafe extern "C" fn trampoline<F, D>(metrics: *const sys::keel_step_metrics, user_data: *mut c_void) -> i32
where
    F: FnMut(&StepMetrics) -> D,
    D: StepDecision,
{
    // SAFETY: user_data is the &mut CallbackState<F> that train_with_callback handed the core,
    // alive for the whole keel_trainer_train call that runs us; the core calls us on that thread.
    let state = &mut *(user_data as *mut CallbackState<F>);
    let Some(metrics) = metrics.as_ref().map(StepMetrics::from) else { return 1 };
    // AssertUnwindSafe: after a panic the closure is never called again, and the panic is
    // reported to the caller, who owns whatever state the closure left half-changed.
    match catch_unwind(AssertUnwindSafe(|| (state.on_step)(&metrics).stops_training())) {
        Ok(stop) => stop as i32,
        Err(payload) => {
            state.panic = Some((metrics.step, payload));
            1
        }
    }
}

pub(crate) fn train_with_callback<F, D>(trainer: &mut Trainer, steps: i64, on_step: F) -> Result<()>
where
    F: FnMut(&StepMetrics) -> D,
    D: StepDecision,
{
    let mut state = CallbackState { on_step, panic: None };
    // SAFETY: a live trainer used by this thread alone (&mut); `state` outlives the call, and
    // the trampoline is instantiated for exactly its type.
    let status = unsafe {
        sys::keel_trainer_train(
            trainer.as_ptr(),
            steps,
            Some(trampoline::<F, D>),
            &mut state as *mut CallbackState<F> as *mut c_void,
        )
    };
    if let Some((step, payload)) = state.panic {
        let message = format!(
            "the step callback panicked after step {step}: {}; training stopped there",
            panic_message(payload.as_ref())
        );
        return Err(Error::new(Status::CallbackPanicked, message));
    }
    check(status)
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(text) = payload.downcast_ref::<&str>() {
        text
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text
    } else {
        "a panic without a message"
    }
}
