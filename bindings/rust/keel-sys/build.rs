// Only link directives: the bindings themselves are committed (src/bindings.rs), so building
// needs no libclang. The library comes from KEEL_LIB_DIR, by default the repository's build/lib.
use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=KEEL_LIB_DIR");
    let lib_dir = match env::var_os("KEEL_LIB_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
            manifest_dir.join("../../../build/lib")
        }
    };
    let library = lib_dir.join("libkeel-core.so");
    if !library.is_file() {
        panic!(
            "keel-sys: {} not found; build Keel first: bash scripts/build.sh \
             (or point KEEL_LIB_DIR at the folder holding libkeel-core.so)",
            library.display()
        );
    }
    let lib_dir = lib_dir.canonicalize().expect("KEEL_LIB_DIR is not a readable folder");
    println!("cargo:rerun-if-changed={}", library.display());
    println!("cargo:rustc-link-search=native={}", lib_dir.display());
    println!("cargo:rustc-link-lib=dylib=keel-core");
    // For this crate's own tests; dependents read it as DEP_KEEL_CORE_LIB_DIR and set their rpath.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib_dir.display());
    println!("cargo:lib_dir={}", lib_dir.display());
}
