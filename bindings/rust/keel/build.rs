// Gives this crate's tests and examples an rpath to libkeel-core: cargo does not pass
// keel-sys's link arguments on to dependents, so keel-sys publishes its folder (`links`
// metadata) and we read it here. We publish it again, for applications: their build.rs adds
//   println!("cargo:rustc-link-arg=-Wl,-rpath,{}", std::env::var("DEP_KEEL_LIB_DIR").unwrap());
// (or they run with LD_LIBRARY_PATH set).
fn main() {
    let lib_dir = std::env::var("DEP_KEEL_CORE_LIB_DIR").expect("keel-sys publishes lib_dir");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib_dir}");
    println!("cargo:lib_dir={lib_dir}");
}
