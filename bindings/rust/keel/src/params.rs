//! Parameters by name: the list (read once, fixed for the trainer's life), copies to and from
//! host memory, and zero-copy views of the strategy's own memory when it keeps whole fp32
//! parameters on the host.
use keel_sys as sys;

use crate::c_text::{c_string, string_from_c};
use crate::error::{check, Error, Result, Status};
use crate::trainer::Trainer;

/// One parameter: its global name ("h.3.attn.qkv.weight") and global shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamInfo {
    pub name: String,
    pub shape: Vec<i64>,
}

impl ParamInfo {
    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().map(|&d| d as usize).product()
    }
}

impl Trainer {
    /// Every parameter, in the model's declaration order.
    pub fn param_infos(&self) -> Result<&[ParamInfo]> {
        if let Some(infos) = self.param_infos.get() {
            return Ok(infos);
        }
        let infos = self.read_param_infos()?;
        Ok(self.param_infos.get_or_init(|| infos))
    }

    pub fn param_names(&self) -> Result<Vec<String>> {
        Ok(self.param_infos()?.iter().map(|info| info.name.clone()).collect())
    }

    fn read_param_infos(&self) -> Result<Vec<ParamInfo>> {
        let mut count = 0usize;
        // SAFETY: a live trainer (!Sync: this thread alone) and a valid out-pointer.
        check(unsafe { sys::keel_trainer_param_count(self.as_ptr(), &mut count) })?;
        (0..count)
            .map(|index| {
                let mut info = sys::keel_param_info {
                    struct_size: std::mem::size_of::<sys::keel_param_info>(),
                    ..Default::default()
                };
                // SAFETY: as above; the core fills at most struct_size bytes.
                check(unsafe { sys::keel_trainer_param_info(self.as_ptr(), index, &mut info) })?;
                let ndim = (info.ndim.max(0) as usize).min(info.shape.len());
                // SAFETY: the name is a C string owned by the trainer, alive while it is.
                Ok(ParamInfo { name: unsafe { string_from_c(info.name) }, shape: info.shape[..ndim].to_vec() })
            })
            .collect()
    }

    fn param_info(&self, name: &str) -> Result<&ParamInfo> {
        let infos = self.param_infos()?;
        infos.iter().find(|info| info.name == name).ok_or_else(|| {
            let first: Vec<&str> = infos.iter().take(3).map(|info| info.name.as_str()).collect();
            Error::new(
                Status::NotFound,
                format!(
                    "no parameter named \"{name}\" ({} parameters, e.g. {first:?}; see param_names())",
                    infos.len()
                ),
            )
        })
    }

    /// A copy of parameter `name`, in row-major order of its global shape.
    pub fn read_param(&self, name: &str) -> Result<Vec<f32>> {
        let mut values = vec![0.0f32; self.param_info(name)?.numel()];
        let c_name = c_string(name, "the parameter name")?;
        // SAFETY: a live trainer, a C string, and a buffer of exactly the count we pass.
        check(unsafe {
            sys::keel_trainer_read_param(self.as_ptr(), c_name.as_ptr(), values.as_mut_ptr(), values.len())
        })?;
        Ok(values)
    }

    /// Overwrites parameter `name`; `values` must hold exactly its element count.
    pub fn write_param(&mut self, name: &str, values: &[f32]) -> Result<()> {
        let c_name = c_string(name, "the parameter name")?;
        // SAFETY: a live trainer used by this thread alone, a C string, and `values.len()` floats.
        check(unsafe { sys::keel_trainer_write_param(self.as_ptr(), c_name.as_ptr(), values.as_ptr(), values.len()) })
    }

    /// The live parameter, without a copy. The borrow keeps `step`, `train`, `load` and
    /// `write_param` (which would move or change it) from running while the view lives.
    /// `Status::Unimplemented` when the strategy does not keep it whole as host fp32 memory.
    pub fn param_view(&self, name: &str) -> Result<&[f32]> {
        let (data, len) = self.host_f32_tensor(name)?;
        // SAFETY: host_f32_tensor checked host memory, fp32, alignment and length; the core
        // keeps it valid until the next step/train/load/destroy, all of which need &mut self.
        Ok(if len == 0 { &[] } else { unsafe { std::slice::from_raw_parts(data, len) } })
    }

    /// As `param_view`, writable: writes change the model.
    pub fn param_view_mut(&mut self, name: &str) -> Result<&mut [f32]> {
        let (data, len) = self.host_f32_tensor(name)?;
        // SAFETY: as in param_view, and &mut self makes this the only view.
        Ok(if len == 0 { &mut [] } else { unsafe { std::slice::from_raw_parts_mut(data, len) } })
    }

    fn host_f32_tensor(&self, name: &str) -> Result<(*mut f32, usize)> {
        let c_name = c_string(name, "the parameter name")?;
        let mut tensor = sys::keel_tensor::default();
        // SAFETY: a live trainer (!Sync: this thread alone), a C string, a valid out struct.
        check(unsafe { sys::keel_trainer_param_tensor(self.as_ptr(), c_name.as_ptr(), &mut tensor) })?;
        let on_host = matches!(tensor.device.device_type as u32, sys::KEEL_DEVICE_CPU | sys::KEEL_DEVICE_CUDA_HOST);
        let is_f32 =
            u32::from(tensor.dtype.code) == sys::KEEL_DTYPE_FLOAT && tensor.dtype.bits == 32 && tensor.dtype.lanes == 1;
        if !on_host || !is_f32 {
            return Err(Error::new(
                Status::Unimplemented,
                format!(
                    "parameter \"{name}\" is not host fp32 memory (device type {}, dtype code {} bits {}); use read_param",
                    tensor.device.device_type, tensor.dtype.code, tensor.dtype.bits
                ),
            ));
        }
        let ndim = (tensor.ndim.max(0) as usize).min(tensor.shape.len());
        let len = tensor.shape[..ndim].iter().map(|&d| d as usize).product();
        let data = (tensor.data as *mut u8).wrapping_add(tensor.byte_offset as usize) as *mut f32;
        if len > 0 && (data.is_null() || data as usize % std::mem::align_of::<f32>() != 0) {
            return Err(Error::new(
                Status::Internal,
                format!("parameter \"{name}\": the core returned a null or misaligned pointer"),
            ));
        }
        Ok((data, len))
    }
}
