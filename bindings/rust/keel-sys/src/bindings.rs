pub const KEEL_MAX_DIMS: u32 = 4;
pub const KEEL_ABI_VERSION_MAJOR: u32 = 0;
pub const KEEL_ABI_VERSION_MINOR: u32 = 19;
pub const KEEL_PLUGIN_ENTRY_SYMBOL: &[u8; 18usize] = b"keel_plugin_entry\0";
pub const KEEL_STEP_INTERRUPTED: u32 = 2;
pub const KEEL_TRAIN_TO_CONFIGURED_STEPS: i32 = -1;
pub type __uint8_t = ::std::os::raw::c_uchar;
pub type __uint16_t = ::std::os::raw::c_ushort;
pub type __int32_t = ::std::os::raw::c_int;
pub type __uint32_t = ::std::os::raw::c_uint;
pub type __int64_t = ::std::os::raw::c_long;
pub type __uint64_t = ::std::os::raw::c_ulong;
pub type keel_status = i32;
pub const KEEL_OK: _bindgen_ty_1 = 0;
pub const KEEL_ERR_INVALID_ARGUMENT: _bindgen_ty_1 = 1;
pub const KEEL_ERR_INVALID_CONFIG: _bindgen_ty_1 = 2;
pub const KEEL_ERR_OUT_OF_MEMORY: _bindgen_ty_1 = 3;
pub const KEEL_ERR_UNIMPLEMENTED: _bindgen_ty_1 = 4;
pub const KEEL_ERR_IO: _bindgen_ty_1 = 5;
pub const KEEL_ERR_ABI_MISMATCH: _bindgen_ty_1 = 6;
pub const KEEL_ERR_NOT_FOUND: _bindgen_ty_1 = 7;
pub const KEEL_ERR_INTERNAL: _bindgen_ty_1 = 8;
pub const KEEL_ERR_NONFINITE: _bindgen_ty_1 = 9;
pub const KEEL_ERR_MISSING_FILE: _bindgen_ty_1 = 10;
pub type _bindgen_ty_1 = ::std::os::raw::c_uint;
pub const KEEL_DEVICE_CPU: _bindgen_ty_2 = 1;
pub const KEEL_DEVICE_CUDA: _bindgen_ty_2 = 2;
pub const KEEL_DEVICE_CUDA_HOST: _bindgen_ty_2 = 3;
pub const KEEL_DEVICE_EXT: _bindgen_ty_2 = 12;
pub type _bindgen_ty_2 = ::std::os::raw::c_uint;
#[repr(C)]
#[derive(Debug, Default, Copy, Clone)]
pub struct keel_device {
    pub device_type: i32,
    pub device_id: i32,
}
#[test]
fn bindgen_test_layout_keel_device() {
    assert_eq!(
        ::std::mem::size_of::<keel_device>(),
        8usize,
        concat!("Size of: ", stringify!(keel_device))
    );
    assert_eq!(
        ::std::mem::align_of::<keel_device>(),
        4usize,
        concat!("Alignment of ", stringify!(keel_device))
    );
    fn test_field_device_type() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_device>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).device_type) as usize - ptr as usize
            },
            0usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_device),
                "::",
                stringify!(device_type)
            )
        );
    }
    test_field_device_type();
    fn test_field_device_id() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_device>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).device_id) as usize - ptr as usize
            },
            4usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_device),
                "::",
                stringify!(device_id)
            )
        );
    }
    test_field_device_id();
}
pub const KEEL_DTYPE_INT: _bindgen_ty_3 = 0;
pub const KEEL_DTYPE_UINT: _bindgen_ty_3 = 1;
pub const KEEL_DTYPE_FLOAT: _bindgen_ty_3 = 2;
pub const KEEL_DTYPE_BFLOAT: _bindgen_ty_3 = 4;
pub type _bindgen_ty_3 = ::std::os::raw::c_uint;
#[repr(C)]
#[derive(Debug, Default, Copy, Clone)]
pub struct keel_dtype {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}
#[test]
fn bindgen_test_layout_keel_dtype() {
    assert_eq!(
        ::std::mem::size_of::<keel_dtype>(),
        4usize,
        concat!("Size of: ", stringify!(keel_dtype))
    );
    assert_eq!(
        ::std::mem::align_of::<keel_dtype>(),
        2usize,
        concat!("Alignment of ", stringify!(keel_dtype))
    );
    fn test_field_code() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_dtype>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).code) as usize - ptr as usize
            },
            0usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_dtype),
                "::",
                stringify!(code)
            )
        );
    }
    test_field_code();
    fn test_field_bits() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_dtype>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).bits) as usize - ptr as usize
            },
            1usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_dtype),
                "::",
                stringify!(bits)
            )
        );
    }
    test_field_bits();
    fn test_field_lanes() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_dtype>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).lanes) as usize - ptr as usize
            },
            2usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_dtype),
                "::",
                stringify!(lanes)
            )
        );
    }
    test_field_lanes();
}
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct keel_tensor {
    pub data: *mut ::std::os::raw::c_void,
    pub device: keel_device,
    pub ndim: i32,
    pub dtype: keel_dtype,
    pub shape: [i64; 4usize],
    pub byte_offset: u64,
}
#[test]
fn bindgen_test_layout_keel_tensor() {
    assert_eq!(
        ::std::mem::size_of::<keel_tensor>(),
        64usize,
        concat!("Size of: ", stringify!(keel_tensor))
    );
    assert_eq!(
        ::std::mem::align_of::<keel_tensor>(),
        8usize,
        concat!("Alignment of ", stringify!(keel_tensor))
    );
    fn test_field_data() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_tensor>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).data) as usize - ptr as usize
            },
            0usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_tensor),
                "::",
                stringify!(data)
            )
        );
    }
    test_field_data();
    fn test_field_device() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_tensor>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).device) as usize - ptr as usize
            },
            8usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_tensor),
                "::",
                stringify!(device)
            )
        );
    }
    test_field_device();
    fn test_field_ndim() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_tensor>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).ndim) as usize - ptr as usize
            },
            16usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_tensor),
                "::",
                stringify!(ndim)
            )
        );
    }
    test_field_ndim();
    fn test_field_dtype() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_tensor>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).dtype) as usize - ptr as usize
            },
            20usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_tensor),
                "::",
                stringify!(dtype)
            )
        );
    }
    test_field_dtype();
    fn test_field_shape() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_tensor>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).shape) as usize - ptr as usize
            },
            24usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_tensor),
                "::",
                stringify!(shape)
            )
        );
    }
    test_field_shape();
    fn test_field_byte_offset() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_tensor>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).byte_offset) as usize - ptr as usize
            },
            56usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_tensor),
                "::",
                stringify!(byte_offset)
            )
        );
    }
    test_field_byte_offset();
}
impl Default for keel_tensor {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const KEEL_KIND_BACKEND: _bindgen_ty_4 = 1;
pub const KEEL_KIND_MODEL: _bindgen_ty_4 = 2;
pub const KEEL_KIND_OPTIMIZER: _bindgen_ty_4 = 3;
pub const KEEL_KIND_STRATEGY: _bindgen_ty_4 = 4;
pub const KEEL_KIND_DATA: _bindgen_ty_4 = 5;
pub const KEEL_KIND_COMM: _bindgen_ty_4 = 6;
pub const KEEL_KIND_SCHEDULE: _bindgen_ty_4 = 7;
pub const KEEL_KIND_OFFLOAD: _bindgen_ty_4 = 8;
pub type _bindgen_ty_4 = ::std::os::raw::c_uint;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct keel_plugin_info {
    pub struct_size: usize,
    pub kind: i32,
    pub name: *const ::std::os::raw::c_char,
    pub version: *const ::std::os::raw::c_char,
    pub abi_major: u32,
    pub abi_minor: u32,
    pub api: *const ::std::os::raw::c_void,
    pub description: *const ::std::os::raw::c_char,
}
#[test]
fn bindgen_test_layout_keel_plugin_info() {
    assert_eq!(
        ::std::mem::size_of::<keel_plugin_info>(),
        56usize,
        concat!("Size of: ", stringify!(keel_plugin_info))
    );
    assert_eq!(
        ::std::mem::align_of::<keel_plugin_info>(),
        8usize,
        concat!("Alignment of ", stringify!(keel_plugin_info))
    );
    fn test_field_struct_size() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_plugin_info>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).struct_size) as usize - ptr as usize
            },
            0usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_plugin_info),
                "::",
                stringify!(struct_size)
            )
        );
    }
    test_field_struct_size();
    fn test_field_kind() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_plugin_info>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).kind) as usize - ptr as usize
            },
            8usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_plugin_info),
                "::",
                stringify!(kind)
            )
        );
    }
    test_field_kind();
    fn test_field_name() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_plugin_info>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).name) as usize - ptr as usize
            },
            16usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_plugin_info),
                "::",
                stringify!(name)
            )
        );
    }
    test_field_name();
    fn test_field_version() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_plugin_info>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).version) as usize - ptr as usize
            },
            24usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_plugin_info),
                "::",
                stringify!(version)
            )
        );
    }
    test_field_version();
    fn test_field_abi_major() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_plugin_info>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).abi_major) as usize - ptr as usize
            },
            32usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_plugin_info),
                "::",
                stringify!(abi_major)
            )
        );
    }
    test_field_abi_major();
    fn test_field_abi_minor() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_plugin_info>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).abi_minor) as usize - ptr as usize
            },
            36usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_plugin_info),
                "::",
                stringify!(abi_minor)
            )
        );
    }
    test_field_abi_minor();
    fn test_field_api() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_plugin_info>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).api) as usize - ptr as usize
            },
            40usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_plugin_info),
                "::",
                stringify!(api)
            )
        );
    }
    test_field_api();
    fn test_field_description() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_plugin_info>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).description) as usize - ptr as usize
            },
            48usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_plugin_info),
                "::",
                stringify!(description)
            )
        );
    }
    test_field_description();
}
impl Default for keel_plugin_info {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct keel_plugin_list {
    pub struct_size: usize,
    pub abi_major: u32,
    pub abi_minor: u32,
    pub count: usize,
    pub plugins: *const keel_plugin_info,
}
#[test]
fn bindgen_test_layout_keel_plugin_list() {
    assert_eq!(
        ::std::mem::size_of::<keel_plugin_list>(),
        32usize,
        concat!("Size of: ", stringify!(keel_plugin_list))
    );
    assert_eq!(
        ::std::mem::align_of::<keel_plugin_list>(),
        8usize,
        concat!("Alignment of ", stringify!(keel_plugin_list))
    );
    fn test_field_struct_size() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_plugin_list>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).struct_size) as usize - ptr as usize
            },
            0usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_plugin_list),
                "::",
                stringify!(struct_size)
            )
        );
    }
    test_field_struct_size();
    fn test_field_abi_major() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_plugin_list>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).abi_major) as usize - ptr as usize
            },
            8usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_plugin_list),
                "::",
                stringify!(abi_major)
            )
        );
    }
    test_field_abi_major();
    fn test_field_abi_minor() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_plugin_list>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).abi_minor) as usize - ptr as usize
            },
            12usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_plugin_list),
                "::",
                stringify!(abi_minor)
            )
        );
    }
    test_field_abi_minor();
    fn test_field_count() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_plugin_list>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).count) as usize - ptr as usize
            },
            16usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_plugin_list),
                "::",
                stringify!(count)
            )
        );
    }
    test_field_count();
    fn test_field_plugins() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_plugin_list>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).plugins) as usize - ptr as usize
            },
            24usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_plugin_list),
                "::",
                stringify!(plugins)
            )
        );
    }
    test_field_plugins();
}
impl Default for keel_plugin_list {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub type keel_plugin_entry_fn =
    ::std::option::Option<unsafe extern "C" fn() -> *const keel_plugin_list>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct keel_trainer {
    _unused: [u8; 0],
}
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct keel_step_metrics {
    pub struct_size: usize,
    pub step: i64,
    pub loss: f32,
    pub lr: f32,
    pub grad_norm: f32,
    pub tokens_per_s: f64,
    pub mfu: f64,
    pub step_ms: f64,
    pub val_loss: f64,
    pub tokens: i64,
    pub data_ms: f64,
    pub forward_ms: f64,
    pub backward_ms: f64,
    pub optimizer_ms: f64,
    pub checkpoint: *const ::std::os::raw::c_char,
    pub model_json: *const ::std::os::raw::c_char,
}
#[test]
fn bindgen_test_layout_keel_step_metrics() {
    assert_eq!(
        ::std::mem::size_of::<keel_step_metrics>(),
        120usize,
        concat!("Size of: ", stringify!(keel_step_metrics))
    );
    assert_eq!(
        ::std::mem::align_of::<keel_step_metrics>(),
        8usize,
        concat!("Alignment of ", stringify!(keel_step_metrics))
    );
    fn test_field_struct_size() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_step_metrics>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).struct_size) as usize - ptr as usize
            },
            0usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_step_metrics),
                "::",
                stringify!(struct_size)
            )
        );
    }
    test_field_struct_size();
    fn test_field_step() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_step_metrics>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).step) as usize - ptr as usize
            },
            8usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_step_metrics),
                "::",
                stringify!(step)
            )
        );
    }
    test_field_step();
    fn test_field_loss() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_step_metrics>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).loss) as usize - ptr as usize
            },
            16usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_step_metrics),
                "::",
                stringify!(loss)
            )
        );
    }
    test_field_loss();
    fn test_field_lr() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_step_metrics>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).lr) as usize - ptr as usize
            },
            20usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_step_metrics),
                "::",
                stringify!(lr)
            )
        );
    }
    test_field_lr();
    fn test_field_grad_norm() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_step_metrics>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).grad_norm) as usize - ptr as usize
            },
            24usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_step_metrics),
                "::",
                stringify!(grad_norm)
            )
        );
    }
    test_field_grad_norm();
    fn test_field_tokens_per_s() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_step_metrics>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).tokens_per_s) as usize - ptr as usize
            },
            32usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_step_metrics),
                "::",
                stringify!(tokens_per_s)
            )
        );
    }
    test_field_tokens_per_s();
    fn test_field_mfu() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_step_metrics>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).mfu) as usize - ptr as usize
            },
            40usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_step_metrics),
                "::",
                stringify!(mfu)
            )
        );
    }
    test_field_mfu();
    fn test_field_step_ms() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_step_metrics>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).step_ms) as usize - ptr as usize
            },
            48usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_step_metrics),
                "::",
                stringify!(step_ms)
            )
        );
    }
    test_field_step_ms();
    fn test_field_val_loss() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_step_metrics>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).val_loss) as usize - ptr as usize
            },
            56usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_step_metrics),
                "::",
                stringify!(val_loss)
            )
        );
    }
    test_field_val_loss();
    fn test_field_tokens() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_step_metrics>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).tokens) as usize - ptr as usize
            },
            64usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_step_metrics),
                "::",
                stringify!(tokens)
            )
        );
    }
    test_field_tokens();
    fn test_field_data_ms() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_step_metrics>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).data_ms) as usize - ptr as usize
            },
            72usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_step_metrics),
                "::",
                stringify!(data_ms)
            )
        );
    }
    test_field_data_ms();
    fn test_field_forward_ms() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_step_metrics>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).forward_ms) as usize - ptr as usize
            },
            80usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_step_metrics),
                "::",
                stringify!(forward_ms)
            )
        );
    }
    test_field_forward_ms();
    fn test_field_backward_ms() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_step_metrics>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).backward_ms) as usize - ptr as usize
            },
            88usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_step_metrics),
                "::",
                stringify!(backward_ms)
            )
        );
    }
    test_field_backward_ms();
    fn test_field_optimizer_ms() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_step_metrics>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).optimizer_ms) as usize - ptr as usize
            },
            96usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_step_metrics),
                "::",
                stringify!(optimizer_ms)
            )
        );
    }
    test_field_optimizer_ms();
    fn test_field_checkpoint() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_step_metrics>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).checkpoint) as usize - ptr as usize
            },
            104usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_step_metrics),
                "::",
                stringify!(checkpoint)
            )
        );
    }
    test_field_checkpoint();
    fn test_field_model_json() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_step_metrics>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).model_json) as usize - ptr as usize
            },
            112usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_step_metrics),
                "::",
                stringify!(model_json)
            )
        );
    }
    test_field_model_json();
}
impl Default for keel_step_metrics {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
extern "C" {
    pub fn keel_last_error() -> *const ::std::os::raw::c_char;
}
extern "C" {
    pub fn keel_register_plugin_library(path: *const ::std::os::raw::c_char) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_create_from_file(
        path: *const ::std::os::raw::c_char,
        out_trainer: *mut *mut keel_trainer,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_create_from_json(
        json_text: *const ::std::os::raw::c_char,
        out_trainer: *mut *mut keel_trainer,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_destroy(trainer: *mut keel_trainer);
}
extern "C" {
    pub fn keel_trainer_step(
        trainer: *mut keel_trainer,
        out_metrics: *mut keel_step_metrics,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_evaluate(trainer: *mut keel_trainer, out_val_loss: *mut f32)
        -> keel_status;
}
pub type keel_step_callback = ::std::option::Option<
    unsafe extern "C" fn(
        metrics: *const keel_step_metrics,
        user_data: *mut ::std::os::raw::c_void,
    ) -> i32,
>;
extern "C" {
    pub fn keel_trainer_train(
        trainer: *mut keel_trainer,
        steps: i64,
        callback: keel_step_callback,
        user_data: *mut ::std::os::raw::c_void,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_last_metrics(
        trainer: *mut keel_trainer,
        out_metrics: *mut keel_step_metrics,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_save(
        trainer: *mut keel_trainer,
        root_dir: *const ::std::os::raw::c_char,
        keep: i32,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_load(
        trainer: *mut keel_trainer,
        checkpoint_path: *const ::std::os::raw::c_char,
    ) -> keel_status;
}
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct keel_param_info {
    pub struct_size: usize,
    pub name: *const ::std::os::raw::c_char,
    pub ndim: i32,
    pub shape: [i64; 4usize],
}
#[test]
fn bindgen_test_layout_keel_param_info() {
    assert_eq!(
        ::std::mem::size_of::<keel_param_info>(),
        56usize,
        concat!("Size of: ", stringify!(keel_param_info))
    );
    assert_eq!(
        ::std::mem::align_of::<keel_param_info>(),
        8usize,
        concat!("Alignment of ", stringify!(keel_param_info))
    );
    fn test_field_struct_size() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_param_info>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).struct_size) as usize - ptr as usize
            },
            0usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_param_info),
                "::",
                stringify!(struct_size)
            )
        );
    }
    test_field_struct_size();
    fn test_field_name() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_param_info>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).name) as usize - ptr as usize
            },
            8usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_param_info),
                "::",
                stringify!(name)
            )
        );
    }
    test_field_name();
    fn test_field_ndim() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_param_info>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).ndim) as usize - ptr as usize
            },
            16usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_param_info),
                "::",
                stringify!(ndim)
            )
        );
    }
    test_field_ndim();
    fn test_field_shape() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_param_info>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).shape) as usize - ptr as usize
            },
            24usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_param_info),
                "::",
                stringify!(shape)
            )
        );
    }
    test_field_shape();
}
impl Default for keel_param_info {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
extern "C" {
    pub fn keel_trainer_param_count(
        trainer: *mut keel_trainer,
        out_count: *mut usize,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_param_info(
        trainer: *mut keel_trainer,
        index: usize,
        out_info: *mut keel_param_info,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_param_tensor(
        trainer: *mut keel_trainer,
        name: *const ::std::os::raw::c_char,
        out_tensor: *mut keel_tensor,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_read_param(
        trainer: *mut keel_trainer,
        name: *const ::std::os::raw::c_char,
        dst: *mut f32,
        count: usize,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_write_param(
        trainer: *mut keel_trainer,
        name: *const ::std::os::raw::c_char,
        src: *const f32,
        count: usize,
    ) -> keel_status;
}
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct keel_plugin_description {
    pub struct_size: usize,
    pub info: *const keel_plugin_info,
    pub kind_name: *const ::std::os::raw::c_char,
    pub path: *const ::std::os::raw::c_char,
}
#[test]
fn bindgen_test_layout_keel_plugin_description() {
    assert_eq!(
        ::std::mem::size_of::<keel_plugin_description>(),
        32usize,
        concat!("Size of: ", stringify!(keel_plugin_description))
    );
    assert_eq!(
        ::std::mem::align_of::<keel_plugin_description>(),
        8usize,
        concat!("Alignment of ", stringify!(keel_plugin_description))
    );
    fn test_field_struct_size() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_plugin_description>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).struct_size) as usize - ptr as usize
            },
            0usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_plugin_description),
                "::",
                stringify!(struct_size)
            )
        );
    }
    test_field_struct_size();
    fn test_field_info() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_plugin_description>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).info) as usize - ptr as usize
            },
            8usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_plugin_description),
                "::",
                stringify!(info)
            )
        );
    }
    test_field_info();
    fn test_field_kind_name() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_plugin_description>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).kind_name) as usize - ptr as usize
            },
            16usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_plugin_description),
                "::",
                stringify!(kind_name)
            )
        );
    }
    test_field_kind_name();
    fn test_field_path() {
        assert_eq!(
            unsafe {
                let uninit = ::std::mem::MaybeUninit::<keel_plugin_description>::uninit();
                let ptr = uninit.as_ptr();
                ::std::ptr::addr_of!((*ptr).path) as usize - ptr as usize
            },
            24usize,
            concat!(
                "Offset of field: ",
                stringify!(keel_plugin_description),
                "::",
                stringify!(path)
            )
        );
    }
    test_field_path();
}
impl Default for keel_plugin_description {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
extern "C" {
    pub fn keel_plugin_count(out_count: *mut usize) -> keel_status;
}
extern "C" {
    pub fn keel_plugin_describe(index: usize, out: *mut keel_plugin_description) -> keel_status;
}
extern "C" {
    pub fn keel_register_plugin(info: *const keel_plugin_info) -> keel_status;
}
extern "C" {
    pub fn keel_register_plugin_replace(info: *const keel_plugin_info) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_vocab_size(
        trainer: *mut keel_trainer,
        out_vocab_size: *mut i32,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_context_length(
        trainer: *mut keel_trainer,
        out_seq_len: *mut i32,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_logits(
        trainer: *mut keel_trainer,
        tokens: *const i32,
        batch: i32,
        seq_len: i32,
        out_logits: *mut f32,
        count: usize,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_generate(
        trainer: *mut keel_trainer,
        prompt: *const i32,
        prompt_length: usize,
        count: i32,
        temperature: f64,
        seed: u64,
        out_tokens: *mut i32,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_forward_backward(
        trainer: *mut keel_trainer,
        tokens: *const i32,
        targets: *const i32,
        batch: i32,
        seq_len: i32,
        out_loss: *mut f32,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_read_grad(
        trainer: *mut keel_trainer,
        name: *const ::std::os::raw::c_char,
        dst: *mut f32,
        count: usize,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_optimizer_step(
        trainer: *mut keel_trainer,
        out_metrics: *mut keel_step_metrics,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_step_on(
        trainer: *mut keel_trainer,
        tokens: *const i32,
        targets: *const i32,
        batch: i32,
        seq_len: i32,
        out_metrics: *mut keel_step_metrics,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_set_verbose(trainer: *mut keel_trainer, verbose: i32) -> keel_status;
}
extern "C" {
    pub fn keel_set_log_level(level: i32) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_export_hf(
        trainer: *mut keel_trainer,
        folder: *const ::std::os::raw::c_char,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_load_hf(
        trainer: *mut keel_trainer,
        path: *const ::std::os::raw::c_char,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_generate_top(
        trainer: *mut keel_trainer,
        prompt: *const i32,
        prompt_length: usize,
        count: i32,
        temperature: f64,
        top_k: i32,
        top_p: f64,
        seed: u64,
        out_tokens: *mut i32,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_gather_param(
        trainer: *mut keel_trainer,
        name: *const ::std::os::raw::c_char,
        dst: *mut f32,
        count: usize,
        out_shape: *mut i64,
        out_ndim: *mut i32,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_set_kv_cache(trainer: *mut keel_trainer, enabled: i32) -> keel_status;
}
pub type keel_token_callback = ::std::option::Option<
    unsafe extern "C" fn(user: *mut ::std::os::raw::c_void, token: i32, index: i64) -> i32,
>;
extern "C" {
    pub fn keel_trainer_generate_each(
        trainer: *mut keel_trainer,
        prompt: *const i32,
        prompt_length: usize,
        max_count: i64,
        temperature: f64,
        top_k: i32,
        top_p: f64,
        seed: u64,
        on_token: keel_token_callback,
        user: *mut ::std::os::raw::c_void,
        out_count: *mut i64,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_forward_backward_packed(
        trainer: *mut keel_trainer,
        tokens: *const i32,
        targets: *const i32,
        positions: *const i32,
        batch: i32,
        seq_len: i32,
        out_loss: *mut f32,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_step_on_packed(
        trainer: *mut keel_trainer,
        tokens: *const i32,
        targets: *const i32,
        positions: *const i32,
        batch: i32,
        seq_len: i32,
        out_metrics: *mut keel_step_metrics,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_trainer_export_hf_tokenizer(
        trainer: *mut keel_trainer,
        folder: *const ::std::os::raw::c_char,
        tokenizer: *const ::std::os::raw::c_char,
    ) -> keel_status;
}
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct keel_tokenizer {
    _unused: [u8; 0],
}
extern "C" {
    pub fn keel_tokenizer_open(
        spec: *const ::std::os::raw::c_char,
        out_tokenizer: *mut *mut keel_tokenizer,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_tokenizer_destroy(tokenizer: *mut keel_tokenizer);
}
extern "C" {
    pub fn keel_tokenizer_vocab_size(
        tokenizer: *mut keel_tokenizer,
        out_vocab_size: *mut i64,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_tokenizer_encode(
        tokenizer: *mut keel_tokenizer,
        text: *const ::std::os::raw::c_char,
        length: usize,
        out_ids: *mut *const i32,
        out_count: *mut usize,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_tokenizer_decode(
        tokenizer: *mut keel_tokenizer,
        ids: *const i32,
        count: usize,
        skip_special: i32,
        out_text: *mut *const ::std::os::raw::c_char,
        out_length: *mut usize,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_tokenizer_token_id(
        tokenizer: *mut keel_tokenizer,
        token: *const ::std::os::raw::c_char,
        out_id: *mut i32,
    ) -> keel_status;
}
extern "C" {
    pub fn keel_tokenizer_token(
        tokenizer: *mut keel_tokenizer,
        id: i32,
        out_token: *mut *const ::std::os::raw::c_char,
        out_special: *mut i32,
    ) -> keel_status;
}
