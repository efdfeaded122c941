//! Links the unwinder statically on Linux with glibc, so that the binary does not load
//! `libgcc_s.so` at start-up: each shared library costs a process about 0.08 ms of exec time,
//! which every command pays (docs/performance.md, twenty-eighth session). Panics still unwind
//! and print backtraces; a `crt-static` build already links the unwinder statically.

fn main() {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let glibc = var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu";
    let crt_static = var("CARGO_CFG_TARGET_FEATURE")
        .split(',')
        .any(|feature| feature == "crt-static");
    if glibc && !crt_static {
        // every object of the archive, so that no `_Unwind_*` symbol is left for libgcc_s,
        // which `--as-needed` then drops
        println!("cargo:rustc-link-lib=static:+whole-archive=gcc_eh");
    }
}
