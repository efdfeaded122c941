//! Start-up on Linux with glibc, which every command pays (docs/performance.md, twenty-eighth
//! session). The unwinder is linked statically, so that the binary does not load `libgcc_s.so`
//! (each shared library costs a process about 0.08 ms of exec time); panics still unwind and
//! print backtraces, and a `crt-static` build links it statically already. And `main.rs` gets
//! `cfg(own_entry)`: the C runtime calls its `entry::main` without Rust's own start-up.

fn main() {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let glibc = var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu";
    let crt_static = var("CARGO_CFG_TARGET_FEATURE")
        .split(',')
        .any(|feature| feature == "crt-static");
    println!("cargo::rustc-check-cfg=cfg(own_entry)");
    if glibc {
        println!("cargo:rustc-cfg=own_entry");
    }
    if glibc && !crt_static {
        // every object of the archive, so that no `_Unwind_*` symbol is left for libgcc_s,
        // which `--as-needed` then drops
        println!("cargo:rustc-link-lib=static:+whole-archive=gcc_eh");
    }
}
