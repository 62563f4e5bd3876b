//! One optimizer step's numbers, copied out of keel_step_metrics so they outlive the call.
use keel_sys as sys;

#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StepMetrics {
    /// Optimizer steps done, after this one.
    pub step: i64,
    /// Mean training loss over the step's micro-batches.
    pub loss: f32,
    pub lr: f32,
    /// Before clipping.
    pub grad_norm: f32,
    pub tokens_per_s: f64,
    /// Fraction of the backend's peak.
    pub mfu: f64,
    pub step_ms: f64,
}

impl StepMetrics {
    /// A zeroed C struct with struct_size set, as the core expects to be handed.
    pub(crate) fn c_out() -> sys::keel_step_metrics {
        sys::keel_step_metrics { struct_size: std::mem::size_of::<sys::keel_step_metrics>(), ..Default::default() }
    }
}

impl From<&sys::keel_step_metrics> for StepMetrics {
    fn from(m: &sys::keel_step_metrics) -> StepMetrics {
        StepMetrics {
            step: m.step,
            loss: m.loss,
            lr: m.lr,
            grad_norm: m.grad_norm,
            tokens_per_s: m.tokens_per_s,
            mfu: m.mfu,
            step_ms: m.step_ms,
        }
    }
}
